"""``traceconv summary``: where the time goes, what is wasteful, and what fixing it would win.

:func:`summarize` runs the stages in the order the data flows, each a module of this package:

1. :mod:`.scopes`: the whole profiled window and, when the trace marks steps, the steps as the
   program lived them (:mod:`traceconv.analyses.prepare` finds them and their GPU work);
2. :mod:`.timeline`: each GPU's busy and idle time over those windows, and its idle gaps by cause;
3. :mod:`.attribution`: operators, ranges, kernels, copies and syncs, and who caused them
   (:mod:`.measure` runs stages 2 and 3 for every scope in one pass);
4. :mod:`.findings` and :mod:`.verdict`: the problems, ranked by what fixing each would win (with
   :mod:`traceconv.analyses.roofline`'s measure of the matrix work: tensor cores, FLOP/s, MFU);
5. :mod:`.advice`: each fix in the words of the program, chosen by what the host was doing;

and :mod:`.coverage` says what the profile cannot answer. Findings and the verdict come from the
steps when there are any (warm-up and set-up outside them would only blur them). :func:`report` is
what the command shows, :func:`as_dict` its JSON form.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from traceconv.analyses import compiled as C
from traceconv.analyses import memory as M
from traceconv.analyses import metrics as U
from traceconv.analyses import ranks as R
from traceconv.analyses import roofline as RF
from traceconv.analyses.finding import Finding, ordered
from traceconv.analyses.graphs import Graphs
from traceconv.analyses.graphs import graphs as graphs_of
from traceconv.analyses.prepare import Facts, as_source, prepare
from traceconv.analyses.ranks.model import RankRow
from traceconv.analyses.results import (
    Copies,
    CriticalPath,
    DeviceTime,
    IdleGaps,
    KernelRow,
    Lack,
    MemoryPeak,
    OpRow,
    RangeRow,
    ScopedBound,
    StepFigures,
    Syncs,
    plain,
)
from traceconv.analyses.source import Source
from traceconv.analyses.steps import STEP_PATTERN, Steps
from traceconv.analyses.summary import measure as MS
from traceconv.analyses.summary.attribution import ops as O
from traceconv.analyses.summary.coverage import lacks
from traceconv.analyses.summary.findings import evaluate, idle_cause
from traceconv.analyses.summary.measure import ScopeStats
from traceconv.analyses.summary.memory_findings import memory_findings
from traceconv.analyses.summary.path import of_scope
from traceconv.analyses.summary.recompiles import recompiles
from traceconv.analyses.summary.replayed import with_replayed_savings
from traceconv.analyses.summary.scopes import step_scope, window_scope
from traceconv.analyses.thresholds import DEFAULTS, Thresholds
from traceconv.errors import UsageError
from traceconv.units import ms

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
    notes: list[str]  # what the reader of the figures should know (warm-up left out, ...)
    sort: str = "gpu_self_ns"  # the operator tables' order: a column
    ranks: list[RankRow] | None = None  # a multi-rank input's ranks, one by one (None: one rank)
    gpu_metrics: U.Utilisation = field(default_factory=dict)  # per device, GPU metrics' means in the focus scope
    lived: Steps | None = None  # the steps, as the program lived them
    lacks: list[Lack] = field(default_factory=list)  # what the profile does not hold
    critical_path: CriticalPath | None = None  # each step's time by what it waited for (steps only)
    graphs: Graphs | None = None  # the CUDA graphs replayed (None: none)
    roofline: RF.Roofline | None = None  # the focus scope's matrix work against the GPU's peaks
    compiled: C.Compiled | None = None  # a compiled program's regions, fused operations and compilations

    @property
    def focus(self) -> ScopeStats:
        """The scope findings are measured on: the steps if marked, else the whole window."""
        return self.steps if self.steps is not None else self.window


# ``--sort``: an operator table column, by its name here or by key_averages()'s sort_by name.
SORTS = {
    "gpu_self": "gpu_self_ns",
    "gpu_total": "gpu_total_ns",
    "cpu_total": "cpu_total_ns",
    "cpu_self": "cpu_self_ns",
    "calls": "calls",
    "self_cuda_time_total": "gpu_self_ns",
    "self_device_time_total": "gpu_self_ns",
    "cuda_time_total": "gpu_total_ns",
    "device_time_total": "gpu_total_ns",
    "cpu_time_total": "cpu_total_ns",
    "self_cpu_time_total": "cpu_self_ns",
    "count": "calls",
}


def summarize(
    data: pa.Table | Source,
    thresholds: Thresholds = DEFAULTS,
    top: int = DEFAULT_TOP,
    step_pattern: str = STEP_PATTERN,
    sort: str = "gpu_self",
    peaks: Mapping[str, float | str] | None = None,
) -> Summary:
    """Summarise an input: a :class:`Source` (Parquet files, read out of core) or a unified table
    (e.g. ``load(path, columns=prepare.INPUT_COLUMNS)``); operators in ``sort`` order (a key of
    :data:`SORTS`); ``peaks``: ``--peak`` overrides of the GPU's peaks
    (:func:`traceconv.analyses.roofline.parse`)."""
    if sort not in SORTS:
        raise UsageError(None, f"--sort {sort!r} is not an operator column", f"choose from {', '.join(SORTS)}")
    source = as_source(data)
    facts = prepare(source, step_pattern)
    scopes = [window_scope(facts)]
    steps_scope = step_scope(facts)
    if steps_scope is not None:
        scopes.append(steps_scope)
    stats, trees = MS.measure(source, facts, scopes, thresholds)
    window = _sorted_ops(stats[0], SORTS[sort])
    steps = _sorted_ops(stats[1], SORTS[sort]) if len(stats) > 1 else None
    focus = steps if steps is not None else window
    names = window.ops["name"].head(top if top else len(window.ops)).tolist()
    per_rank = R.analyse(source, step_pattern, thresholds) if R.several(source) else None
    memory = M.memory(source, facts.steps, top, facts.window[0])
    utilisation = utilisation_of(source, steps)
    roof = RF.roofline(source, roofline_windows(focus, facts), peaks)
    made = C.compiled(source)
    found, replay_notes = with_replayed_savings(
        source,
        facts,
        evaluate(focus, thresholds, facts.program, utilisation, roof),
        step_pattern,
        idle_cause(focus, thresholds),
    )
    found += memory_findings(memory, thresholds, facts.program)
    found += [f for f in (recompiles(focus, made, thresholds, facts.program),) if f is not None]
    notes = facts_notes(source, facts, step_pattern) + _queue_note(focus, facts, thresholds) + replay_notes
    return Summary(
        source=facts.source,
        window=window,
        steps=steps,
        findings=ordered(found + per_rank.findings) if per_rank is not None else ordered(found),
        memory=memory,
        shapes=O.input_dims(source, trees, names),
        thresholds=thresholds,
        notes=notes + M.notes(source, memory) + _rank_notes(per_rank),
        sort=SORTS[sort],
        ranks=per_rank.ranks if per_rank is not None else None,
        gpu_metrics=utilisation,
        lived=facts.steps,
        lacks=lacks(source, facts),
        critical_path=of_scope(steps),
        graphs=graphs_of(source),
        roofline=roof,
        compiled=made,
    )


def roofline_windows(focus: ScopeStats, facts: Facts) -> RF.Windows:
    """The roofline's scope, the summary's focus: the steps (by their host ranges; each as long as the
    program lived it), or the whole window, as long as the GPUs' span of work."""
    lived = facts.steps
    if focus.scope.name == "steps" and lived is not None:
        return RF.Windows("steps", lived.cpu_start_ns, lived.cpu_end_ns, lived.end_ns - lived.start_ns)
    lo, hi = facts.window
    one = np.array([focus.scope.step_ns], np.int64)
    return RF.Windows("window", np.array([lo], np.int64), np.array([hi], np.int64), one)


def _queue_note(focus: ScopeStats, facts: Facts, t: Thresholds) -> list[str]:
    """Kernels that wait long in the queue mean the host runs ahead: the GPU is the limit (said once:
    the steps' own note says it where the steps show it)."""
    f = focus.launch
    if f.queue_median_ns is None or f.kernels < t.min_kernels or f.queue_median_ns / 1e3 < t.QUEUE_WAIT:
        return []
    if facts.steps is not None and any("ran ahead" in n for n in facts.steps.notes()):
        return []
    return [
        f"kernels wait a median {ms(f.queue_median_ns)} between their launch call and their start: the host runs "
        "ahead of the GPU, which is the limit (QUEUE_WAIT: information, not a problem)"
    ]


def utilisation_of(source: Source, steps: ScopeStats | None) -> U.Utilisation:
    """GPU metrics' means over the steps' samples (as the GPUs ran the steps); without steps, over every sample."""
    if steps is None:
        return U.scope_means(source)
    return U.scope_means(source, *steps.scope.gpu.default)


def _rank_notes(per_rank: R.RanksReport | None) -> list[str]:
    if per_rank is None:
        return []
    return [
        f"{len(per_rank.ranks)} ranks: the GPU lines are per rank; the steps are one thread's, and the operator, "
        "kernel, copy and sync tables add up every rank (`traceconv ranks` compares the ranks)"
    ]


def _sorted_ops(stats: ScopeStats, column: str) -> ScopeStats:
    ops = stats.ops.sort_values([column, "name"], ascending=[False, True], kind="stable").reset_index(drop=True)
    return dataclasses.replace(stats, ops=ops)


def facts_notes(source: Source, facts: Facts, step_pattern: str) -> list[str]:
    """What a reader of one trace's figures should know about its steps and rows."""
    notes = facts.steps.notes() if facts.steps is not None else []
    if facts.steps is None and step_pattern != STEP_PATTERN:
        notes.append(f"no range matches --steps {step_pattern!r}: measured on the whole profiled window")
    if facts.steps is None and facts.gpu_spans:
        span = max(e - s for s, e in facts.gpu_spans.values())
        notes.append(
            f"without steps, each GPU's busy and idle time is measured from its first work to its last "
            f"({ms(span)} of the {ms(facts.window[1] - facts.window[0])} profiled), as `traceconv ranks` measures it"
        )
    unlaunched = int(
        source.scalar(
            "SELECT count(*) FROM events WHERE kind IN ('kernel', 'memcpy', 'memset') AND launch_event_id IS NULL"
        )
    )
    if unlaunched:
        notes.append(
            f"{unlaunched:,} GPU rows have no launching call in the trace (work launched before the capture, "
            "UVM migrations ...): counted by their own start, with no queue time"
        )
    return notes


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
    notes: list[str]
    sort: str
    gpu_metrics: U.Utilisation  # per device: GPU metrics' means over the findings' scope
    idle_gaps: IdleGaps  # the focus scope's idle gaps by cause: what each fix would win, at most
    lacks: list[Lack]  # what the profile does not hold, what that hides, how to record it
    critical_path: CriticalPath | None  # the steps' time by what they waited for (null without steps)
    graphs: Graphs | None  # the CUDA graphs replayed (null: none)
    roofline: RF.Roofline | None  # the matrix work against the GPU's peaks: tensor cores, FLOP/s, MFU
    compiled: C.Compiled | None = None  # regions and fused operations cut to ``top`` (null: nothing compiled)
    ranks: list[RankRow] | None = None  # a multi-rank input's ranks (not in the JSON of one rank)


def report(s: Summary, top: int = DEFAULT_TOP) -> SummaryReport:
    """The report of a summary: times in ns, sizes in bytes, lists cut to ``top`` rows (0: all)."""
    w = s.window
    return SummaryReport(
        source=s.source,
        window_ns=w.scope.window_ns,
        steps=step_figures(s.steps, s.lived),
        gpu=w.gpu,
        bound=ScopedBound(**vars(s.focus.bound), scope=s.focus.scope.name),
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
        notes=s.notes,
        sort=s.sort,
        ranks=s.ranks,
        gpu_metrics=s.gpu_metrics,
        idle_gaps=s.focus.gaps,
        lacks=s.lacks,
        critical_path=s.critical_path,
        graphs=s.graphs,
        roofline=RF.cut(s.roofline, top) if s.roofline is not None else None,
        compiled=_cut(s.compiled, top),
    )


def _cut(made: C.Compiled | None, top: int) -> C.Compiled | None:
    if made is None or not top:
        return made
    return dataclasses.replace(made, regions=made.regions[:top], fused=made.fused[:top])


def as_dict(s: Summary, top: int = DEFAULT_TOP) -> dict[str, Any]:
    """The JSON form of :func:`report`."""
    return report_dict(report(s, top))


def report_dict(r: SummaryReport) -> dict[str, Any]:
    """A report's JSON form; ``ranks`` only for an input of several ranks."""
    out: dict[str, Any] = plain(r)
    if r.ranks is None:
        del out["ranks"]
    return out


def step_figures(st: ScopeStats | None, lived: Steps | None) -> StepFigures | None:
    if st is None or lived is None:
        return None
    dur = lived.end_ns - lived.start_ns
    return StepFigures(
        count=st.scope.steps,
        label=st.scope.label,
        median_ns=lived.median_ns,
        cpu_median_ns=lived.cpu_median_ns,
        host_ahead_ns=lived.host_ahead_ns,
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
