"""``traceconv summary``: where the time goes and what is wasteful, for one trace.

:func:`summarize` measures the whole profiled window (tables of operators, kernels,
copies, syncs, GPU busy time) and, when the trace marks steps, the steps alone; findings
and the CPU/GPU-bound verdict come from the steps when there are any (warm-up and
set-up outside them would only blur them). :func:`as_dict` is the JSON form.
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
from traceconv.analyses.stats import ScopeStats, measure, step_scope, window_scope

DEFAULT_TOP = 10


@dataclass(frozen=True)
class Summary:
    source: str
    window: ScopeStats
    steps: ScopeStats | None
    findings: list[Finding]
    memory: dict[str, dict[str, int]]
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


def as_dict(s: Summary, top: int = DEFAULT_TOP) -> dict[str, Any]:
    """The JSON form: times in ns, sizes in bytes, lists cut to ``top`` rows (0: all)."""
    w = s.window
    return {
        "source": s.source,
        "window_ns": w.scope.window_ns,
        "steps": steps_dict(s.steps),
        "gpu": w.gpu,
        "bound": {**s.focus.bound, "scope": s.focus.scope.name},
        "top_ops": op_records(w.ops, top, s.shapes),
        "top_cpu_ops": op_records(top_cpu(w.ops), top, s.shapes),
        "nvtx": records(w.nvtx, O.NVTX_COLUMNS, top),
        "top_kernels": kernel_records(w.kernels, top),
        "memcpy": w.memcpy,
        "sync": w.sync,
        "memory": s.memory,
        "findings": [f.as_dict() for f in s.findings],
        "findings_scope": s.focus.scope.name,
        "thresholds": s.thresholds.as_dict(),
    }


def steps_dict(st: ScopeStats | None) -> dict[str, Any] | None:
    if st is None:
        return None
    dur = st.scope.end_ns - st.scope.start_ns
    return {
        "count": st.scope.steps,
        "label": st.scope.label,
        "avg_ns": round(float(dur.mean())),
        "min_ns": int(dur.min()),
        "max_ns": int(dur.max()),
        "window_ns": st.scope.window_ns,
        "gpu": st.gpu,
        "memcpy": st.memcpy,
        "sync": st.sync,
    }


def top_cpu(ops: pd.DataFrame) -> pd.DataFrame:
    """Operators (not annotations) by self CPU time: where the host spends its time."""
    cpu = ops[ops["kind"] == "cpu_op"]
    out: pd.DataFrame = cpu.sort_values(["cpu_self_ns", "name"], ascending=[False, True], kind="stable")
    result: pd.DataFrame = out.reset_index(drop=True)
    return result


def op_records(ops: pd.DataFrame, top: int, shapes: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    out = records(ops, O.OP_COLUMNS, top)
    for item in out:
        item.update(shapes.get(item["name"], {"input_dims": None, "shapes": 0}))
    return out


def kernel_records(kernels: pd.DataFrame, top: int) -> list[dict[str, Any]]:
    return records(kernels, (*O.KERNEL_COLUMNS, "short_name"), top)


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
