"""``traceconv summary``: where the time goes and what is wasteful, for one trace.

:func:`summarize` measures the whole profiled window (tables of operators, kernels,
copies, syncs, GPU busy time) and, when the trace marks steps, the steps alone; findings
and the CPU/GPU-bound verdict come from the steps when there are any (warm-up and
set-up outside them would only blur them). :func:`report` is what the command shows, :func:`as_dict` its JSON form.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from traceconv.analyses import ops as O
from traceconv.analyses import transfers as T
from traceconv.analyses.findings import DEFAULTS, Finding, Thresholds, evaluate
from traceconv.analyses.prepare import STEP_PATTERN, Frames, prepare
from traceconv.analyses.results import (
    Copies,
    DeviceTime,
    KernelRow,
    MemoryPeak,
    OpRow,
    RangeRow,
    ScopedBound,
    StepFigures,
    Syncs,
    plain,
)
from traceconv.analyses.stats import ScopeStats, measure, step_scope, window_scope

DEFAULT_TOP = 10


@dataclass(frozen=True)
class Summary:
    source: str
    window: ScopeStats
    steps: ScopeStats | None
    findings: list[Finding]
    memory: dict[str, MemoryPeak]
    shapes: dict[str, dict[str, Any]]  # operator name -> input_dims, shapes
    thresholds: Thresholds

    @property
    def focus(self) -> ScopeStats:
        """The scope findings are measured on: the steps if marked, else the whole window."""
        return self.steps if self.steps is not None else self.window


def summarize(
    table: pa.Table, thresholds: Thresholds = DEFAULTS, top: int = DEFAULT_TOP, step_pattern: str = STEP_PATTERN
) -> Summary:
    """Summarise a unified table (e.g. ``load(path, columns=prepare.INPUT_COLUMNS)``)."""
    frames = prepare(table, step_pattern)
    return summarize_frames(frames, thresholds, top)


def summarize_frames(frames: Frames, thresholds: Thresholds = DEFAULTS, top: int = DEFAULT_TOP) -> Summary:
    window = measure(frames, window_scope(frames), thresholds.gpu_bound_pct)
    scope = step_scope(frames)
    steps = measure(frames, scope, thresholds.gpu_bound_pct) if scope is not None else None
    focus = steps if steps is not None else window
    names = window.ops["name"].head(top if top else len(window.ops)).tolist()
    return Summary(
        source=frames.source,
        window=window,
        steps=steps,
        findings=evaluate(focus, thresholds),
        memory=T.memory_peaks(frames.memory),
        shapes=O.input_dims(frames.table, frames.ranges, names),
        thresholds=thresholds,
    )


@dataclass(frozen=True)
class SummaryReport:
    """What ``summary`` shows and writes as JSON (:func:`as_dict`), lists cut to the ``top`` rows."""

    source: str
    window_ns: int
    steps: StepFigures | None
    gpu: dict[str, DeviceTime]
    bound: ScopedBound
    top_ops: list[OpRow]
    top_cpu_ops: list[OpRow]
    nvtx: list[RangeRow]
    top_kernels: list[KernelRow]
    memcpy: dict[str, Copies]
    sync: Syncs
    memory: dict[str, MemoryPeak]
    findings: list[Finding]
    findings_scope: str
    thresholds: Thresholds


def report(s: Summary, top: int = DEFAULT_TOP) -> SummaryReport:
    """The report of a summary: times in ns, sizes in bytes, lists cut to ``top`` rows (0: all)."""
    w = s.window
    return SummaryReport(
        source=s.source,
        window_ns=w.scope.window_ns,
        steps=step_figures(s.steps),
        gpu=w.gpu,
        bound=ScopedBound(**plain(s.focus.bound), scope=s.focus.scope.name),
        top_ops=op_rows(w.ops, top, s.shapes),
        top_cpu_ops=op_rows(top_cpu(w.ops), top, s.shapes),
        nvtx=[RangeRow(**r) for r in records(w.nvtx, O.NVTX_COLUMNS, top)],
        top_kernels=[KernelRow(**r) for r in records(w.kernels, (*O.KERNEL_COLUMNS, "short_name"), top)],
        memcpy=w.memcpy,
        sync=w.sync,
        memory=s.memory,
        findings=s.findings,
        findings_scope=s.focus.scope.name,
        thresholds=s.thresholds,
    )


def as_dict(s: Summary, top: int = DEFAULT_TOP) -> dict[str, Any]:
    """The JSON form of :func:`report`."""
    out: dict[str, Any] = plain(report(s, top))
    return out


def step_figures(st: ScopeStats | None) -> StepFigures | None:
    if st is None:
        return None
    dur = st.scope.end_ns - st.scope.start_ns
    return StepFigures(
        count=st.scope.steps,
        label=st.scope.label,
        avg_ns=round(float(dur.mean())),
        min_ns=int(dur.min()),
        max_ns=int(dur.max()),
        window_ns=st.scope.window_ns,
        gpu=st.gpu,
        memcpy=st.memcpy,
        sync=st.sync,
    )


def top_cpu(ops: pd.DataFrame) -> pd.DataFrame:
    """Operators (not annotations) by self CPU time: where the host spends its time."""
    cpu = ops[ops["kind"] == "cpu_op"]
    out: pd.DataFrame = cpu.sort_values(["cpu_self_ns", "name"], ascending=[False, True], kind="stable")
    result: pd.DataFrame = out.reset_index(drop=True)
    return result


def op_rows(ops: pd.DataFrame, top: int, shapes: dict[str, dict[str, Any]]) -> list[OpRow]:
    return [
        OpRow(**r, **shapes.get(r["name"], {"input_dims": None, "shapes": 0})) for r in records(ops, O.OP_COLUMNS, top)
    ]


def records(df: pd.DataFrame, columns: tuple[str, ...], top: int) -> list[dict[str, Any]]:
    """Rows as plain JSON values: ``*_ns``, counts and bytes as exact integers, other numbers rounded."""
    part = df.head(top) if top else df
    out = []
    for row in part.loc[:, list(columns)].itertuples(index=False):
        out.append({c: _plain(c, v) for c, v in zip(columns, row, strict=True)})
    return out


def _plain(column: str, v: Any) -> Any:
    if v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v)):
        return None
    if isinstance(v, (np.integer, int)) or column.endswith("_ns") or column in ("calls", "count", "bytes"):
        return round(float(v)) if not isinstance(v, str) else v
    if isinstance(v, (np.floating, float)):
        return round(float(v), 2)
    return str(v)
