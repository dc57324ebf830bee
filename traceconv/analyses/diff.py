"""``traceconv diff``: two runs lined up, per step where both mark steps, else per profiled window.

Each side is measured like ``summary`` on its steps (or whole window), then divided by its
step count, so that runs with different numbers of steps compare. The JSON form has
``before`` and ``after`` (the keys of ``summary``, per step) and ``delta`` (after minus
before, with the operators, kernels and copy directions that appeared or disappeared).
Syncs are given in all and by kind, ``result_waits`` and ``staging``, each with its causes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import pyarrow as pa

from traceconv.analyses import compiled as C
from traceconv.analyses import ranks as R
from traceconv.analyses import roofline as RF
from traceconv.analyses.compiled.families import FamilyChange, kernels_by_family, line_up
from traceconv.analyses.diff_results import (
    CopyChange,
    CopyTotals,
    DeviceChange,
    FindingChanges,
    KeptFinding,
    OpChange,
    OpShare,
    SyncChange,
    SyncChanges,
    SyncShare,
    SyncShares,
)
from traceconv.analyses.finding import Finding, ordered
from traceconv.analyses.metrics import Utilisation
from traceconv.analyses.prepare import as_source, prepare
from traceconv.analyses.ranks.compare import RankChange, compare
from traceconv.analyses.results import Bound, CriticalPath, DeviceTime, SyncTally, plain
from traceconv.analyses.source import Source
from traceconv.analyses.steps import STEP_PATTERN
from traceconv.analyses.summary import DEFAULT_TOP, facts_notes, roofline_windows, utilisation_of
from traceconv.analyses.summary.findings import evaluate
from traceconv.analyses.summary.measure import ScopeStats, measure
from traceconv.analyses.summary.path import of_scope
from traceconv.analyses.summary.recompiles import recompiles
from traceconv.analyses.summary.scopes import Scope, step_scope, window_scope
from traceconv.analyses.thresholds import DEFAULTS, Thresholds

_OP_MEASURES = ("calls", "gpu_self_ns", "gpu_total_ns", "cpu_total_ns", "cpu_self_ns")
_KERNEL_MEASURES = ("count", "dur_ns", "queue_ns")
_COPY_MEASURES = ("count", "bytes", "dur_ns")


@dataclass(frozen=True)
class Side:
    stats: ScopeStats
    findings: list[Finding]
    gpu_metrics: Utilisation = field(default_factory=dict)  # GPU metrics' means in the scope

    @property
    def steps(self) -> int:
        return self.stats.scope.steps


@dataclass(frozen=True)
class Diff:
    scope: str  # "steps" or "window"
    note: str | None
    before: Side
    after: Side
    notes: list[str]  # about either run: warm-up left out, different sources, ...
    ranks: list[RankChange] | None = None  # two multi-rank runs, rank by rank
    families: list[FamilyChange] = field(default_factory=list)  # what a compiler fused (a side has Inductor kernels)


def diff(
    before: pa.Table | Source,
    after: pa.Table | Source,
    thresholds: Thresholds = DEFAULTS,
    step_pattern: str = STEP_PATTERN,
) -> Diff:
    """Compare two inputs (Sources, or unified tables: ``load(path, columns=prepare.INPUT_COLUMNS)``)."""
    sources = [as_source(before), as_source(after)]
    frames = [prepare(s, step_pattern) for s in sources]
    steps = [step_scope(f) for f in frames]
    note = None
    scopes: list[Scope | None] = list(steps)
    if steps[0] is None or steps[1] is None:
        marked = [name for name, s in zip(("before", "after"), steps, strict=True) if s is not None]
        note = (
            f"only {marked[0]} marks steps" if marked else "neither run marks steps"
        ) + "; comparing the whole profiled windows, not normalised"
        scopes = [window_scope(f) for f in frames]
    per_rank = [R.analyse(s, step_pattern, thresholds) if R.several(s) else None for s in sources]
    sides = []
    for source, f, scope, pr in zip(sources, frames, scopes, per_rank, strict=True):
        assert scope is not None
        stats = measure(source, f, [scope], thresholds)[0][0]
        u = utilisation_of(source, stats if scope.name == "steps" else None)
        roof = RF.roofline(source, roofline_windows(stats, f))  # NO_TENSOR_CORES and LOW_MFU, as in summary
        found = evaluate(stats, thresholds, f.program, u, roof)
        found += [x for x in (recompiles(stats, C.compiled(source), thresholds, f.program),) if x is not None]
        sides.append(Side(stats, ordered(found + pr.findings) if pr is not None else found, u))
    notes = [
        f"{side}: {n}"
        for side, source, f in zip(("before", "after"), sources, frames, strict=True)
        for n in facts_notes(source, f, step_pattern)
    ]
    if frames[0].source != frames[1].source:
        notes.insert(
            0,
            f"before is {frames[0].source} and after {frames[1].source}: their operators, ranges and kernel names "
            "are recorded differently, so compare the steps, GPU time, copies and syncs rather than names",
        )
    ranks = None
    if per_rank[0] is not None and per_rank[1] is not None:
        ranks, pairing = compare(per_rank[0], per_rank[1])
        notes += pairing
    fams = fused_families(sources, [s.stats.scope for s in sides])
    return Diff("steps" if note is None else "window", note, sides[0], sides[1], notes, ranks, fams)


def fused_families(sources: list[Source], scopes: list[Scope]) -> list[FamilyChange]:
    """Both runs' kernels by operator family, where either has Inductor kernels (else nothing to line up)."""
    tables = [kernels_by_family(src, sc.start_ns, sc.end_ns) for src, sc in zip(sources, scopes, strict=True)]
    if not any(t["fused"].any() for t in tables if not t.empty):
        return []
    return line_up(tables[0], tables[1], (scopes[0].steps, scopes[1].steps))


@dataclass(frozen=True)
class SideReport:
    """One run, per step (per window without steps): the figures of ``summary`` for its scope."""

    steps: int
    label: str | None
    step_ns: int
    gpu_time_ns: int
    gpu: dict[str, DeviceTime]
    bound: Bound
    top_ops: list[dict[str, Any]]  # name and OP_MEASURES
    top_kernels: list[dict[str, Any]]  # name and KERNEL_MEASURES
    memcpy: dict[str, CopyTotals]
    sync: SyncShares
    findings: list[Finding]
    gpu_metrics: Utilisation
    critical_path: CriticalPath | None = None  # the median step by what it waited for (steps only)


@dataclass(frozen=True)
class DeltaReport:
    """After minus before, per step; names and directions marked appeared, disappeared or kept."""

    step_ns: int
    gpu_time_ns: int
    gpu: dict[str, DeviceChange]
    top_ops: list[dict[str, Any]]
    top_kernels: list[dict[str, Any]]
    memcpy: dict[str, CopyChange]
    sync: SyncChanges
    findings: FindingChanges
    gpu_metrics: Utilisation  # per device, after minus before (points), metrics both sides have


@dataclass(frozen=True)
class DiffReport:
    scope: str
    note: str | None
    before: SideReport
    after: SideReport
    delta: DeltaReport
    notes: list[str]
    families: list[FamilyChange]  # per operator family, what a compiler fused (empty: neither run is compiled)
    ranks: list[RankChange] | None = None  # two multi-rank runs, rank by rank (not in the JSON otherwise)


def report(d: Diff, top: int = DEFAULT_TOP) -> DiffReport:
    b, a = side_report(d.before, top), side_report(d.after, top)
    fams = d.families[:top] if top else d.families
    return DiffReport(d.scope, d.note, b, a, delta(d, b, a, top), d.notes, fams, d.ranks)


def as_dict(d: Diff, top: int = DEFAULT_TOP) -> dict[str, Any]:
    """The JSON form of :func:`report`."""
    return report_dict(report(d, top))


def report_dict(r: DiffReport) -> dict[str, Any]:
    """A report's JSON form; ``ranks`` only when both runs have several ranks."""
    out: dict[str, Any] = plain(r)
    if r.ranks is None:
        del out["ranks"]
    return out


def side_report(side: Side, top: int) -> SideReport:
    """One run per step: the keys of ``summary`` for the scope, every figure divided by its steps."""
    s, n = side.stats, side.steps
    return SideReport(
        steps=n,
        label=s.scope.label,
        step_ns=s.scope.step_ns,
        gpu_time_ns=_per(s.gpu_time_ns, n),
        gpu={dev: DeviceTime(*(_per(v, n) for v in (d.busy_ns, d.idle_ns, d.window_ns))) for dev, d in s.gpu.items()},
        bound=s.bound,
        top_ops=_per_rows(s.ops, ("name", *_OP_MEASURES), n, top),
        top_kernels=_per_rows(s.kernels, ("name", *_KERNEL_MEASURES), n, top),
        memcpy={
            k: CopyTotals(_per(v.count, n, count=True), _per(v.bytes, n), _per(v.dur_ns, n))
            for k, v in s.memcpy.items()
        },
        sync=SyncShares(
            **vars(_sync_per(s.sync, n)),
            result_waits=_sync_per(s.sync.result_waits, n),
            staging=_sync_per(s.sync.staging, n),
        ),
        findings=side.findings,
        gpu_metrics=side.gpu_metrics,
        critical_path=of_scope(s),
    )


def delta(d: Diff, b: SideReport, a: SideReport, top: int) -> DeltaReport:
    nb, na = d.before.steps, d.after.steps
    return DeltaReport(
        step_ns=a.step_ns - b.step_ns,
        gpu_time_ns=a.gpu_time_ns - b.gpu_time_ns,
        gpu={
            key: DeviceChange(**_changes(x, y, ("busy_ns", "idle_ns", "window_ns")))
            for key, x, y in _pairs(plain(b.gpu), plain(a.gpu))
        },
        top_ops=_table_delta(
            d.before.stats.ops, d.after.stats.ops, _OP_MEASURES, nb, na, top, ("gpu_self_ns", "cpu_self_ns")
        ),
        top_kernels=_table_delta(
            d.before.stats.kernels, d.after.stats.kernels, _KERNEL_MEASURES, nb, na, top, ("dur_ns",)
        ),
        memcpy={
            key: CopyChange(**_changes(x, y, _COPY_MEASURES)) for key, x, y in _pairs(plain(b.memcpy), plain(a.memcpy))
        },
        sync=SyncChanges(
            **vars(_sync_delta(b.sync, a.sync)),
            result_waits=_sync_delta(b.sync.result_waits, a.sync.result_waits),
            staging=_sync_delta(b.sync.staging, a.sync.staging),
        ),
        findings=_findings_delta(d.before.findings, d.after.findings),
        gpu_metrics=metrics_delta(b.gpu_metrics, a.gpu_metrics),
    )


def metrics_delta(b: Utilisation, a: Utilisation) -> Utilisation:
    """Per device both sides have: after minus before for each metric both have."""
    return {
        dev: {k: round(a[dev][k] - v, 2) for k, v in b[dev].items() if k in a[dev]} for dev in sorted(set(b) & set(a))
    }


def _status(before: float, after: float) -> str:
    if not before and after:
        return "appeared"
    if before and not after:
        return "disappeared"
    return "kept"


def _table_delta(
    before: pd.DataFrame,
    after: pd.DataFrame,
    measures: tuple[str, ...],
    nb: int,
    na: int,
    top: int,
    rank: tuple[str, ...],
) -> list[dict[str, Any]]:
    """Per name, after minus before (per step), biggest change first; names on one side only included."""
    cols = list(measures)
    b = before.set_index("name")[cols].astype("float64") / nb
    a = after.set_index("name")[cols].astype("float64") / na
    b, a = b.groupby(level=0).sum(), a.groupby(level=0).sum()
    both = pd.merge(b, a, how="outer", left_index=True, right_index=True, suffixes=("_b", "_a")).fillna(0.0)
    size = sum((both[f"{m}_a"] - both[f"{m}_b"]).abs() for m in rank)
    both = both.assign(_size=size).sort_values(["_size"], ascending=False, kind="stable")
    both = both[both["_size"] > 0]
    out = []
    count_col = measures[0]
    for name, r in (both.head(top) if top else both).iterrows():
        item: dict[str, Any] = {"name": str(name), "status": _status(r[f"{count_col}_b"], r[f"{count_col}_a"])}
        for m in measures:
            item[m] = _num(m, r[f"{m}_a"] - r[f"{m}_b"])
        item["before"] = {m: _num(m, r[f"{m}_b"]) for m in (count_col, rank[0])}
        item["after"] = {m: _num(m, r[f"{m}_a"]) for m in (count_col, rank[0])}
        out.append(item)
    return out


def _pairs(b: dict[str, Any], a: dict[str, Any]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """The keys of either side, sorted, with each side's figures (empty where it lacks the key)."""
    return [(key, b.get(key, {}), a.get(key, {})) for key in sorted(set(b) | set(a))]


def _changes(x: dict[str, Any], y: dict[str, Any], measures: tuple[str, ...]) -> dict[str, Any]:
    item: dict[str, Any] = {m: _num(m, y.get(m, 0) - x.get(m, 0)) for m in measures}
    item["status"] = _status(x.get(measures[0], 0), y.get(measures[0], 0))
    return item


def _sync_per(sync: SyncTally, n: int) -> SyncShare:
    """Count, blocked time and causes of syncs (all, or one kind), per step."""
    ops = [OpShare(o.name, o.region, _per(o.count, n, count=True), _per(o.dur_ns, n)) for o in sync.ops]
    return SyncShare(count=_per(sync.count, n, count=True), dur_ns=_per(sync.dur_ns, n), ops=ops)


def _sync_delta(b: SyncShare, a: SyncShare) -> SyncChange:
    return SyncChange(count=round(a.count - b.count, 2), dur_ns=a.dur_ns - b.dur_ns, ops=_sync_ops_delta(b.ops, a.ops))


def _sync_ops_delta(b: list[OpShare], a: list[OpShare]) -> list[OpChange]:
    bi, ai = {(o.name, o.region or ""): o for o in b}, {(o.name, o.region or ""): o for o in a}
    out = []
    for k in sorted(set(bi) | set(ai)):
        x, y = bi.get(k), ai.get(k)
        xc, yc = (x.count if x else 0), (y.count if y else 0)
        xd, yd = (x.dur_ns if x else 0), (y.dur_ns if y else 0)
        out.append(OpChange(k[0], k[1] or None, _status(xc, yc), round(yc - xc, 2), yd - xd, xc, yc))
    return sorted(out, key=lambda o: -abs(o.count))


def _findings_delta(b: list[Finding], a: list[Finding]) -> FindingChanges:
    bc, ac = {f.code: f for f in b}, {f.code: f for f in a}
    return FindingChanges(
        gone=[c for c in bc if c not in ac],
        new=[c for c in ac if c not in bc],
        kept=[KeptFinding(c, bc[c].value, ac[c].value, [bc[c].severity, ac[c].severity]) for c in bc if c in ac],
    )


def _per(value: float, n: int, count: bool = False) -> Any:
    return round(value / n, 2) if count else round(value / n)


def _num(measure: str, v: float) -> Any:
    return round(v) if measure.endswith("_ns") or measure == "bytes" else round(float(v), 2)


def _per_rows(df: pd.DataFrame, columns: tuple[str, ...], n: int, top: int) -> list[dict[str, Any]]:
    part = df.head(top) if top else df
    return [
        {c: (str(v) if c == "name" else _num(c, float(v) / n)) for c, v in zip(columns, row, strict=True)}
        for row in part.loc[:, list(columns)].itertuples(index=False)
    ]
