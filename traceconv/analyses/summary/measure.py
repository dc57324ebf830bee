"""Everything a summary measures, for each of its scopes (the whole window, the steps), out of core.

The stages after the scopes (:mod:`.scopes`): the GPU timeline (:mod:`.timeline`: busy time, idle
time by cause, the idle gaps and what caused them) over each scope's GPU windows, and the
attribution (:mod:`.attribution`: the host ranges' trees, walked once for every scope, with the
GPU rows, copies and syncs as DuckDB queries). A row belongs to a scope by its anchor time: GPU
work by the start of the call that launched it (its own start when the launch is not in the
trace), host ranges and syncs by their start. GPU busy time is the union of a device's kernels,
copies, memsets and whole graphs, clipped to the scope's GPU windows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from traceconv.analyses import intervals as I
from traceconv.analyses.prepare import HOST_RANGES, HOST_THREAD, Facts
from traceconv.analyses.results import Bound, Copies, DeviceTime, IdleBreakdown, IdleGaps, LaunchFacts, Syncs
from traceconv.analyses.source import Source, Within
from traceconv.analyses.summary.attribution import gpu as G
from traceconv.analyses.summary.attribution import leaf_gpu as LG
from traceconv.analyses.summary.attribution import leaves as L
from traceconv.analyses.summary.attribution import syncs as Y
from traceconv.analyses.summary.attribution.tree import BATCH_ROWS as TREE_BATCH_ROWS
from traceconv.analyses.summary.attribution.tree import KIND_CODES, NVTX, Trees, walk
from traceconv.analyses.summary.scopes import GpuWindows, Scope
from traceconv.analyses.summary.timeline import busy as B
from traceconv.analyses.summary.timeline import gaps as GP
from traceconv.analyses.summary.verdict import verdict
from traceconv.analyses.thresholds import Thresholds
from traceconv.analyses.vocabulary import graph_launched
from traceconv.errors import ResourceError

PARTS = (1, 8, 64)  # the aggregate per host range is tried whole, then in this many parts
LAUNCH_BUCKET_NS = 1 << 20  # the time buckets of the launches' running sums


@dataclass(frozen=True)
class ScopeStats:
    scope: Scope
    gpu: dict[str, DeviceTime]
    bound: Bound
    gpu_time_ns: int  # summed durations of the GPU rows in scope (streams that overlap count twice)
    ops: pd.DataFrame
    nvtx: pd.DataFrame
    kernels: pd.DataFrame
    memcpy: dict[str, Copies]
    sync: Syncs
    launch: LaunchFacts  # its medians: the last scope only (None for the others)
    gaps: IdleGaps  # the GPUs' idle gaps by cause: what each fix would win, at most (classified: the last scope only)
    per_step: np.ndarray | None = None  # steps: each step's time by part (timeline.busy.PARTS), summed over GPUs


def measure(
    source: Source, facts: Facts, scopes: Sequence[Scope], thresholds: Thresholds
) -> tuple[list[ScopeStats], Trees]:
    """The statistics of each scope, and the trees' pass (its samples of operator calls). The last scope
    is the summary's focus (the steps, where there are): only its launch medians are measured and its
    idle gaps classified, which nothing reads of the others (their gaps' totals give their verdict)."""
    windows = [I.union(s.start_ns, s.end_ns) for s in scopes]
    withins = [source.within(f"in_scope_{k}", *segments) for k, segments in enumerate(windows)]
    lived = [s.gpu for s in scopes]
    source.table(G.GROUPS, G.scope_groups(source, withins))
    kernel_medians = G.medians(source, withins, [k == len(scopes) - 1 for k in range(len(scopes))])  # the focus'
    source.table("scoped_copies", G.scoped_copies(source, withins))
    Y.prepare_calls(source)
    # what the sweep reads of the GPU rows, once per slice of the time line: a table, not the file
    source.table("gpu_spans", B.gpu_times(source))
    # and each scope's steps one by one (for their critical path), as scopes of the sweep's own; steps
    # that do not overlap cover the time their union does, so their sweep gives the scope's figures too
    swept_windows: list[GpuWindows] = []
    flags: list[bool] = []
    plan: list[tuple[int, int | None]] = []  # per scope: its figures' place in the sweep, its steps'
    for scope, gpu in zip(scopes, lived, strict=True):
        alone = scope.each is not None and not gpu.devices and I.disjoint(*scope.each)
        plan.append((len(swept_windows), len(swept_windows) if alone else None))
        swept_windows.append(GpuWindows(scope.each) if alone and scope.each is not None else gpu)
        flags.append(alone)
    for k, scope in enumerate(scopes):
        if scope.each is not None and plan[k][1] is None:
            plan[k] = (plan[k][0], len(swept_windows))
            swept_windows.append(GpuWindows(scope.each))
            flags.append(True)
    gap_ns = round(thresholds.launch_gap_us * 1e3)
    swept = B.sweep(source, Y.SYNC_SPANS, Y.API_SPANS, swept_windows, "SELECT * FROM gpu_spans", gap_ns, flags)
    sweeps = [(swept[at], swept[steps].per_window if steps is not None else None) for at, steps in plan]
    source.run("DROP TABLE gpu_spans")
    source.run("DROP TABLE api_spans")
    calls = L.scan(source, facts, trace_codes(source), Y.blocking_ids(source))
    # the syncs classified: the call before each blocking one is the calls' pass's where it read them all
    Y.classify(source, calls.previous_calls() if calls is not None else None)
    query, traces = tree_stream(source, facts, calls)
    if calls is not None:  # the calls are leaves: they were found their parents on the way
        trees = L.walk(source, calls, query, facts, traces, windows)
        del calls  # their parents by event id: held no longer than the trees' pass
    else:
        trees = walk(source.batches(query, TREE_BATCH_ROWS), windows, facts.label_names, traces)
    source.register("regions", _regions(trees))
    # the gaps classified (the syncs behind them, the host's work in them) only for the last scope, the
    # summary's focus: the others need only their totals (the verdict)
    out = [
        _measure(
            source, facts, scope, withins[k], trees, k, (sweeps[k], kernel_medians[k]), thresholds, k == len(scopes) - 1
        )
        for k, scope in enumerate(scopes)
    ]
    source.run(f"DROP TABLE {G.GROUPS}")
    source.run("DROP TABLE scoped_copies")
    return out, trees


def _measure(
    source: Source,
    facts: Facts,
    scope: Scope,
    within: Within,
    trees: Trees,
    k: int,
    passes: tuple[tuple[B.Swept, np.ndarray | None], dict[str, Any]],  # the sweep's, the medians'
    thresholds: Thresholds,
    classified: bool = True,
) -> ScopeStats:
    groups = G.scope_rows(G.GROUPS, k)
    gpu_ns = G.gpu_time(source, groups)
    (swept, per_step), kernel_medians = passes
    busy, idle, gaps = swept.times, swept.idle, swept.gaps
    launch = G.launch_facts(source, groups, kernel_medians)
    calls = G.in_scope("SELECT * FROM sync_calls WHERE start_ns IS NOT NULL", within, "start_ns")
    idle_gaps = GP.idle_gaps(source, gaps, ended_ranges(facts)) if classified else GP.totals(gaps)
    return ScopeStats(
        scope=scope,
        gpu=busy,
        bound=_bound(busy, idle, idle_gaps, thresholds),
        gpu_time_ns=gpu_ns,
        ops=trees.op_table(k),
        nvtx=trees.nvtx_table(k),
        kernels=G.kernel_table(source, groups),
        memcpy=G.copies(source, G.scope_rows("scoped_copies", k), gpu_ns),
        sync=Y.tally(source, calls, facts.last_anchor),
        launch=launch,
        gaps=idle_gaps,
        per_step=per_step,
    )


def _bound(busy: dict[str, DeviceTime], idle: IdleBreakdown, gaps: IdleGaps, t: Thresholds) -> Bound:
    """The verdict (:mod:`traceconv.analyses.summary.verdict`), the GPUs' busy share, and their idle time by
    cause; ``idle_in_api_pct``: the share of the idle time the host spent inside CUDA calls."""
    window = sum(d.window_ns for d in busy.values())
    if not window:
        return Bound(verdict="no GPU activity", gpu_busy_pct=0.0, idle_in_api_pct=None, idle_ns=idle)
    busy_ns = sum(d.busy_ns for d in busy.values())
    pct = busy_ns * 100.0 / window
    return Bound(
        verdict=verdict(pct, gaps, t.gpu_bound_pct),
        gpu_busy_pct=round(pct, 1),
        idle_in_api_pct=idle.pct(idle.host_sync + idle.host_launch) if idle.total > 0 else None,
        idle_ns=idle,
    )


def trace_codes(source: Source) -> list[str]:
    """The trace ids (sorted) that the trees' ``tc`` codes stand for, registered as ``trace_codes``."""

    def read() -> list[str]:
        got = source.arrow("SELECT DISTINCT coalesce(trace_id, '') AS t FROM events ORDER BY t")["t"].to_pylist()
        source.register("trace_codes", pa.table({"trace_id": pa.array(got, pa.string()), "tc": range(len(got))}))
        return [str(t) for t in got]

    traces: list[str] = source.kept("trace_codes", read)
    return traces


def tree_stream(source: Source, facts: Facts, calls: L.Calls | None = None) -> tuple[str, list[str]]:
    """The query of the host ranges with what the trees' pass needs, in (thread, start, longest
    first) order, and the trace ids its ``trace`` codes stand for. With ``calls`` (the CUDA API
    calls, found to be leaves), the ranges without them: GPU rows find their launching call and
    its process by event id instead of a join with millions of calls, and are read once, a batch
    at a time, into what the trees need of them (``leaf_gpu.gpu_pass``).

    Otherwise each step is a temporary table of integer columns, so that no query holds more than
    one join or sort at a time and DuckDB can spill each within its memory budget.
    """
    traces = trace_codes(source)
    kinds = " ".join(f"WHEN '{k}' THEN {i}" for i, k in enumerate(KIND_CODES))
    source.table(
        "tree_ranges",
        # names as their label codes (a small join here, not a join on text over every range later)
        f"SELECT c.tc, r.event_id, CAST(CASE r.kind {kinds} END AS TINYINT) AS kind, "
        "CAST(coalesce(l.id, -1) AS INTEGER) AS label, coalesce(l.is_step, false) AS step, r.start_ns, "
        f"coalesce(r.end_ns, {facts.last_end}) AS end_ns, r.end_ns IS NULL AS open, r.dur_ns, "
        f"{HOST_THREAD} AS thread, r.pid "
        f"FROM ({HOST_RANGES}) r JOIN trace_codes c USING (trace_id) LEFT JOIN labels l ON l.name = r.name"
        + (" WHERE r.kind <> 'cuda_api'" if calls is not None else ""),
    )
    if calls is not None:
        with L.launch_lookup(source, calls) as call_pid:
            nodes = _nodes(f"({_launched(source, call_pid)})", "tree_ranges", call_pid)
            LG.gpu_pass(source, calls, traces[0], nodes, call_pid)
        return ranges_query(), traces
    _gpu_nodes(source)
    _per_range_sums(source)
    _process_gpu(source)
    source.table(  # each memcpy row's first node (its launching call, else its operator)
        "copy_nodes",
        "SELECT c.trace_id, g.gpu_id AS event_id, g.first_node AS node FROM tree_gpu g "
        "JOIN trace_codes c USING (tc) WHERE g.copy",
    )
    source.run("DROP TABLE tree_gpu")
    return ranges_query(), traces


def _launched(source: Source, call_pid: Callable[[str], str]) -> str:
    """The GPU rows with their launch node (the launching range, or call kept out of ``tree_ranges``:
    ``call_pid`` is SQL for the process of such a call) and its process."""
    return (
        "SELECT c.tc, g.event_id AS gpu_id, g.kind = 'memcpy' AS copy, coalesce(g.dur_ns, 0) AS d, g.launch_start_ns, "
        "coalesce(rl.event_id, CASE WHEN g.cp IS NOT NULL THEN g.launch_event_id END) AS launch_node, "
        "coalesce(rl.pid, g.cp) AS launch_pid, g.op_event_id, "
        f"coalesce({graph_launched(source, 'g.launch_name')}, false) AS replay "
        f"FROM (SELECT *, {call_pid('launch_event_id')} AS cp FROM events "
        "WHERE kind IN ('kernel', 'memcpy', 'memset')) g JOIN trace_codes c ON c.trace_id = coalesce(g.trace_id, '') "
        "LEFT JOIN tree_ranges rl ON rl.tc = c.tc AND rl.event_id = g.launch_event_id"
    )


def _nodes(gpu: str, ops: str, call_pid: Callable[[str], str]) -> str:
    """The GPU rows with a launch node (``gpu``: :func:`_launched`'s) and their operator among the
    ranges of ``ops`` (or a call kept out of them); those with neither left out. A row's first node
    (where its GPU time enters the trees) is its launching call, else its operator; a CUDA graph
    replay's row, its operator (that which captured it where the capture is in the profile, else the
    one around its launch, the launching call's parent)."""
    op_node = f"coalesce(ro.event_id, CASE WHEN {call_pid('g.op_event_id')} IS NOT NULL THEN g.op_event_id END)"
    first = f"CASE WHEN g.replay AND {op_node} IS NOT NULL THEN {op_node} ELSE coalesce(g.launch_node, {op_node}) END"
    return (
        f"SELECT g.tc, g.gpu_id, g.copy, g.d, g.launch_start_ns, g.launch_node, g.launch_pid, {op_node} AS op_node, "
        f"{first} AS first_node "
        f"FROM {gpu} g LEFT JOIN {ops} ro ON ro.tc = g.tc AND ro.event_id = g.op_event_id "
        f"WHERE g.launch_node IS NOT NULL OR {op_node} IS NOT NULL"
    )


def _no_call(column: str) -> str:
    """No call kept out of the ranges: every launch is among them."""
    return L.NONE


def _gpu_nodes(source: Source) -> None:
    """The table ``tree_gpu``: the GPU rows with their launching range and their operator among the
    host ranges, one join per statement (with both joins in one, DuckDB 2.0 runs out of budgets of
    384-512 MB that it does not run out of at 256 MB: it holds both hash tables instead of
    partitioning them)."""
    source.table("tree_gpu_launch", _launched(source, _no_call))
    # The operators among the ranges: far fewer than the ranges, so that the join is on a small table.
    source.table(
        "tree_ops",
        "SELECT r.tc, r.event_id FROM tree_ranges r SEMI JOIN "
        "(SELECT DISTINCT tc, op_event_id FROM tree_gpu_launch WHERE op_event_id IS NOT NULL) o "
        "ON o.tc = r.tc AND o.op_event_id = r.event_id",
    )
    source.table("tree_gpu", _nodes("tree_gpu_launch", "tree_ops", _no_call))
    source.run("DROP TABLE tree_ops")
    source.run("DROP TABLE tree_gpu_launch")


def ranges_query() -> str:
    """The trees' stream: the host ranges of ``tree_ranges`` in (thread, start, longest first)
    order, with their GPU sums."""
    return (
        "SELECT r.tc AS trace, r.event_id, r.kind, r.label, r.kind < 2 AS is_op, "
        "r.step AND r.kind < 2 AS is_step, r.kind = 1 AND NOT r.step "
        "AS is_region, r.start_ns, r.end_ns, r.dur_ns, r.thread, coalesce(g.self_gpu, 0) AS self_gpu, "
        "coalesce(g.first_gpu, 0) AS first_gpu, coalesce(p.process_gpu, 0) AS process_gpu, "
        "coalesce(g.wanted, false) AS wanted FROM tree_ranges r "
        "LEFT JOIN tree_gpu_sums g USING (tc, event_id) LEFT JOIN tree_process p USING (tc, event_id) "
        "ORDER BY r.thread, r.start_ns, r.end_ns DESC, r.event_id"
    )


def ended_ranges(facts: Facts) -> GP.HostRanges:
    """The operators and annotations of ``tree_ranges`` that ended, steps aside: what the host did in the
    long idle gaps, read from the table the trees read, not from the file again."""
    sql = (
        "SELECT kind, label, start_ns, end_ns FROM tree_ranges "
        f"WHERE kind IN ({KIND_CODES.index('cpu_op')}, {NVTX}) AND NOT step AND NOT open"
    )
    return GP.HostRanges(sql, KIND_CODES, facts.label_names)


def _process_gpu(source: Source) -> None:
    """The table ``tree_process``: per NVTX range, the GPU time of the rows its process launched while
    it was open (launch start within its start and end), whatever thread launched them.

    Each end's sum of every launch up to it, less its start's: the sums of whole time buckets of
    :data:`LAUNCH_BUCKET_NS` before the bucket of the time (a running sum over the buckets, of which
    there are far fewer than launches), plus the launches of its own bucket up to it (a hash join of
    the launches on the ends' buckets); no sort of the launches.
    """
    w = LAUNCH_BUCKET_NS
    launched = "FROM tree_gpu WHERE launch_node IS NOT NULL AND launch_start_ns IS NOT NULL"
    source.table(
        "tree_buckets",  # per process and bucket its GPU time, and the time of the buckets before it
        "SELECT tc, pid, bucket, total, CAST(sum(total) OVER (PARTITION BY tc, pid ORDER BY bucket "
        "ROWS UNBOUNDED PRECEDING) AS BIGINT) - total AS before FROM (SELECT tc, launch_pid AS pid, "
        f"launch_start_ns // {w} AS bucket, isum(d) AS total {launched} GROUP BY ALL)",
    )
    source.table(
        "tree_process",
        "WITH nv AS (SELECT tc, event_id, pid, t, sign, t // "
        f"{w} AS bucket FROM (SELECT tc, event_id, pid, start_ns - 1 AS t, -1 AS sign FROM tree_ranges WHERE kind = 1 "
        "UNION ALL SELECT tc, event_id, pid, end_ns, 1 FROM tree_ranges WHERE kind = 1)), "
        "own AS (SELECT n.tc, n.event_id, n.sign, isum(g.d) AS part FROM nv n JOIN (SELECT tc, launch_pid, "
        f"launch_start_ns, d {launched}) g ON g.tc = n.tc AND g.launch_pid = n.pid "
        f"AND g.launch_start_ns // {w} = n.bucket AND g.launch_start_ns <= n.t GROUP BY ALL), "
        "earlier AS (SELECT n.tc, n.event_id, n.sign, CASE WHEN b.bucket = n.bucket THEN b.before "
        "ELSE b.before + b.total END AS pre FROM nv n ASOF LEFT JOIN tree_buckets b "
        "ON n.tc = b.tc AND n.pid = b.pid AND n.bucket >= b.bucket) "
        "SELECT e.tc, e.event_id, isum((coalesce(e.pre, 0) + coalesce(o.part, 0)) * e.sign) AS process_gpu "
        "FROM earlier e LEFT JOIN own o USING (tc, event_id, sign) GROUP BY ALL",
    )
    source.run("DROP TABLE tree_buckets")


def _per_range_sums(source: Source) -> None:
    """The table ``tree_gpu_sums``: per host range, the GPU time whose
    operator it is, whose first node it is, and whether its region is asked for. A group per
    launching call (millions in a large trace): where DuckDB cannot hold them within its memory
    budget, the event ids are aggregated a part at a time, so that each hash table holds a part of
    the groups; only the last number of parts may grow the budget."""
    for parts in PARTS:
        try:
            with source.fixed_budget(parts != PARTS[-1]):
                _sums_in_parts(source, parts)
            return
        except ResourceError:
            if parts == PARTS[-1]:
                raise


def _sums_in_parts(source: Source, parts: int) -> None:
    for k in range(parts):
        part = f"WHERE (event_id % {parts} + {parts}) % {parts} = {k}" if parts > 1 else ""
        select = (
            "SELECT tc, event_id, isum(self_gpu) AS self_gpu, isum(first_gpu) AS first_gpu, "
            "bool_or(wanted) AS wanted FROM (SELECT tc, op_node AS event_id, d AS self_gpu, 0 AS first_gpu, "
            "false AS wanted FROM tree_gpu WHERE op_node IS NOT NULL UNION ALL SELECT tc, "
            "first_node, 0, d, copy FROM tree_gpu UNION ALL SELECT c.tc, s.event_id, 0, 0, "
            "true FROM sync_calls s JOIN trace_codes c USING (trace_id) WHERE NOT s.activity) "
            f"{part} GROUP BY ALL"
        )
        if k == 0:
            source.table("tree_gpu_sums", select)
        else:
            source.run(f"INSERT INTO tree_gpu_sums {select}")


def _regions(trees: Trees) -> pa.Table:
    keys = list(trees.regions)
    return pa.table(
        {
            "trace_id": pa.array([k[0] for k in keys], pa.string()),
            "event_id": pa.array([k[1] for k in keys], pa.int64()),
            "region": pa.array(list(trees.regions.values()), pa.string()),
        }
    )
