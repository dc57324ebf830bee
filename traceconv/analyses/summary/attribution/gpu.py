"""The GPU rows of a scope, aggregated in SQL: kernels per name, copies per direction, launch figures.

A GPU row belongs to a scope by its anchor: the start of the call that launched it, or its own
start when the launch is not in the trace. ``occupancy_pct`` (the computed estimate, else the
theoretical occupancy, else Kineto's figure) is weighted by execution time;
NCCL kernels (which occupy SMs while they wait) are left out of the occupancy figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from traceconv.analyses.prepare import NO_OP
from traceconv.analyses.results import Copies, CopyOpTally, LaunchFacts
from traceconv.analyses.source import Source, Within
from traceconv.analyses.vocabulary import graph_replayed

TOP_OPS = 5


def _gpu(source: Source) -> str:
    """The GPU rows with what the tables need; ``replayed``: a kernel replayed from a graph (its launch is
    the graph's: :func:`~traceconv.analyses.vocabulary.graph_replayed`)."""
    return (
        "SELECT coalesce(trace_id, '') AS trace_id, event_id, kind, name, short_name, start_ns, end_ns, dur_ns, "
        "device, launch_event_id, launch_start_ns, launch_end_ns, queue_ns, op_event_id, op_name, bytes, "
        # occupancy: computed from the launch configuration (est, else theoretical), else Kineto's figure
        "coalesce(est_occupancy_pct, theoretical_occupancy_pct, occupancy_pct) AS occupancy_pct, occupancy_limiter, "
        "copy_kind, src_kind, dst_kind, coalesce(launch_start_ns, start_ns) AS anchor, "
        f"{graph_replayed(source)} AS replayed FROM events "
        "WHERE kind IN ('kernel', 'memcpy', 'memset', 'graph')"
    )


KERNEL, MEMCPY, MEMSET, GRAPH = 0, 1, 2, 3  # GRAPH: a graph traced whole, in the kernel tables
GROUPS = "gpu_groups"  # the table of :func:`scope_groups`


def scope_groups(source: Source, withins: list[Within]) -> str:
    """The GPU rows summed per kind (``k``: :data:`KERNEL`, ...), name, occupancy limiter and the
    scopes they lie in (``in_K``: the row's anchor lies in scope K, ``withins[K]``), with what each
    scope's figures add up: a few thousand groups in one pass over the file, where a table of the rows
    (written out once, then read by each query) cost several times as long. The medians are
    :func:`medians`."""
    return (
        f"SELECT CAST(CASE kind WHEN 'kernel' THEN {KERNEL} WHEN 'memcpy' THEN {MEMCPY} WHEN 'memset' THEN {MEMSET} "
        f"ELSE {GRAPH} END AS UTINYINT) "
        f"AS k, name, CAST(occupancy_limiter AS VARCHAR) AS limiter{_flags(withins)}, "
        "count(*) AS n, count(api) AS n_api, count(queue_ns) AS n_queue, total(dur_ns) AS dur, "
        "total(queue_ns) AS queue, count(*) FILTER (WHERE dur_ns < api) AS n_tiny, "
        "min(event_id) FILTER (WHERE dur_ns < api) AS tiny_first, "
        "arg_min(short_name, event_id) FILTER (WHERE short_name IS NOT NULL) AS short_name, "
        "min(event_id) FILTER (WHERE short_name IS NOT NULL) AS short_first, "
        f"sum(occupancy_pct * CAST(coalesce(dur_ns, 0) AS DOUBLE)) FILTER ({_OCC}) AS occ_w, "
        f"sum(CAST(coalesce(dur_ns, 0) AS DOUBLE)) FILTER ({_OCC}) AS occ_t, count(*) FILTER ({_OCC}) AS occ_n, "
        f"CAST(sum(dur_ns) FILTER ({_OCC}) AS BIGINT) AS occ_dur "
        f"FROM ({_rows(source)}) g{_joins(withins)} GROUP BY ALL"
    )


def _rows(source: Source) -> str:
    """The GPU rows with ``api``: a kernel's own launch call's time (none for a kernel replayed from a
    graph: one call launches them all)."""
    api = "CASE WHEN replayed THEN NULL ELSE launch_end_ns - launch_start_ns END"
    return f"SELECT *, {api} AS api FROM ({_gpu(source)})"


_OCC = "WHERE occupancy_pct IS NOT NULL"
MEDIANS = ("tiny_med", "api_med", "queue_med")  # what :func:`medians` gives each scope


def medians(source: Source, withins: list[Within], wanted: Sequence[bool] = ()) -> list[dict[str, Any]]:
    """Per scope, the kernels' medians: execution time of those shorter than their launch call,
    launch call time, queue time; only for the scopes ``wanted`` flags (none flagged: all), None for
    the others. A statement per measure (each for every scope wanted): an exact median holds every
    value of its group, so the three together would need three times the memory budget of one (and
    grow it) on a trace of millions of kernels."""
    out: list[dict[str, Any]] = [dict.fromkeys(MEDIANS) for _ in withins]
    ks = [k for k in range(len(withins)) if not wanted or (k < len(wanted) and wanted[k])]
    if not ks:
        return out
    flags = "".join(f", {withins[k].test('g.anchor')} AS in_{k}" for k in ks)
    joins = "".join(withins[k].join("g.anchor") for k in ks)
    for m, x in zip(MEDIANS, ("dur_ns", "api", "queue_ns"), strict=True):
        tiny = m == "tiny_med"
        picks = ", ".join(
            f"median({x}) FILTER (WHERE in_{k}{' AND dur_ns < api' if tiny else ''}) AS m_{k}" for k in ks
        )
        row = source.arrow(
            f"SELECT {picks} FROM (SELECT {'dur_ns, api' if tiny else x}{flags} FROM ({_rows(source)}) g"
            f"{joins} WHERE kind = 'kernel')"
        ).to_pylist()[0]
        for k in ks:
            out[k][m] = row[f"m_{k}"]
    return out


def _flags(withins: list[Within]) -> str:
    """``, in_K`` for each scope: whether the row's anchor lies in it (after :func:`_joins`)."""
    return "".join(f", {w.test('g.anchor')} AS in_{k}" for k, w in enumerate(withins))


def _joins(withins: list[Within]) -> str:
    return "".join(w.join("g.anchor") for w in withins)


def scoped_copies(source: Source, withins: list[Within]) -> str:
    """The copies (memcpy rows) with what copies have, and ``in_K`` as :func:`scope_groups` has it."""
    return (
        f"SELECT trace_id, event_id, dur_ns, op_name, bytes, copy_kind, src_kind, dst_kind{_flags(withins)} "
        f"FROM (SELECT * FROM ({_gpu(source)}) WHERE kind = 'memcpy') g{_joins(withins)}"
    )


def scope_rows(table: str, k: int) -> str:
    """The rows (or groups) of scope ``k`` of a :func:`scoped_copies` or :func:`scope_groups` table."""
    return f"SELECT * FROM {table} WHERE in_{k}"


def in_scope(rows_sql: str, within: Within, time: str) -> str:
    """The rows of ``rows_sql`` whose ``time`` lies in the scope's windows."""
    return f"SELECT r.* FROM ({rows_sql}) r{within.join(f'r.{time}')} WHERE {within.test(f'r.{time}')}"


def gpu_time(source: Source, groups: str) -> int:
    """The summed durations of a scope's GPU rows (``groups``: its :func:`scope_groups`)."""
    return int(source.scalar(f"SELECT total(dur) FROM ({groups})"))


def kernel_table(source: Source, groups: str) -> pd.DataFrame:
    """Kernels per name: count, execution total and mean, queue total and mean, share of the kernels' time."""
    out = source.frame(
        # a kernel named "(unnamed)" and unnamed ones are one
        "SELECT coalesce(name, '(unnamed)') AS name, isum(n) AS count, isum(dur) AS dur_ns, isum(queue) AS queue_ns, "
        "isum(n_queue) AS queued, arg_min(short_name, short_first) AS short_name, sum(occ_w) AS occ_w, "
        f"sum(occ_t) AS occ_t FROM ({groups}) WHERE k IN ({KERNEL}, {GRAPH}) GROUP BY 1"
    )
    out["occupancy_pct"] = (out["occ_w"] / out["occ_t"].where(out["occ_t"] > 0)).astype("float64")
    out["avg_ns"] = out["dur_ns"] / out["count"]
    out["queue_avg_ns"] = (out["queue_ns"] / out["queued"]).where(out["queued"] > 0).astype("float64")
    total = out["dur_ns"].sum()
    out["time_pct"] = out["dur_ns"] * 100.0 / total if total else 0.0
    out = out[
        ["name", "count", "dur_ns", "queue_ns", "short_name", "occupancy_pct", "avg_ns", "queue_avg_ns", "time_pct"]
    ]
    ordered: pd.DataFrame = out.sort_values(["dur_ns", "count", "name"], ascending=[False, False, True], kind="stable")
    result: pd.DataFrame = ordered.reset_index(drop=True)
    return result


def copies(source: Source, copies_sql: str, gpu_ns: int) -> dict[str, Copies]:
    """Per copy direction (``copies_sql``: the scope's rows of a :func:`scoped_copies` table): count,
    bytes, time, bandwidth, share of GPU time, host memory kind, issuing ops."""
    rows = source.arrow(
        "SELECT coalesce(copy_kind, 'Unknown') AS dir, count(*) AS n, total(bytes) AS size, "
        "total(dur_ns) AS dur, count(*) FILTER (WHERE src_kind = 'Pageable' OR dst_kind = 'Pageable') "
        "AS pageable, count(*) FILTER (WHERE src_kind = 'Pinned' OR dst_kind = 'Pinned') AS pinned "
        f"FROM ({copies_sql}) GROUP BY 1 ORDER BY 1"
    ).to_pylist()
    ops = _copy_ops(source, copies_sql)
    return {
        str(r["dir"]): Copies(
            count=int(r["n"]),
            bytes=int(r["size"]),
            dur_ns=int(r["dur"]),
            bandwidth_gbps=round(r["size"] / r["dur"], 2) if r["dur"] else None,
            gpu_time_pct=round(r["dur"] * 100.0 / gpu_ns, 2) if gpu_ns else 0.0,
            pageable_count=int(r["pageable"]),
            pinned_count=int(r["pinned"]),
            ops=ops.get(str(r["dir"]), []),
        )
        for r in rows
    }


def _copy_ops(source: Source, copies_sql: str) -> dict[str, list[CopyOpTally]]:
    """Per direction, the operators (and the annotation around them) that issued the copies, most time first."""
    rows = source.frame(
        "SELECT coalesce(c.copy_kind, 'Unknown') AS dir, coalesce(l.label, ?) AS op, coalesce(r.region, '') AS region, "
        "count(*) AS count, total(c.dur_ns) AS dur_ns, total(c.bytes) AS bytes, "
        "min(c.event_id) AS first "
        f"FROM ({copies_sql}) c LEFT JOIN labels l ON l.name = c.op_name "
        "LEFT JOIN copy_nodes n ON n.trace_id = c.trace_id AND n.event_id = c.event_id "
        "LEFT JOIN regions r ON r.trace_id = n.trace_id AND r.event_id = n.node "
        "GROUP BY ALL ORDER BY dir, dur_ns DESC, count DESC, first",
        [NO_OP],
    )
    out: dict[str, list[CopyOpTally]] = {}
    for direction, part in rows.groupby("dir", sort=False):
        out[str(direction)] = [
            CopyOpTally(str(r.op), _region(r.region, r.op), int(r.count), int(r.dur_ns), int(r.bytes))
            for r in part.head(TOP_OPS).itertuples()
        ]
    return out


def _region(region: Any, op: Any) -> str | None:
    return str(region) if region and region != op else None


def launch_facts(source: Source, groups: str, medians: dict[str, Any]) -> LaunchFacts:
    """Kernel launch figures: queue median, kernels shorter than their own launch call, occupancy
    (``groups``: the scope's :func:`scope_groups`; ``medians``: its :func:`medians`)."""
    kernels = f"SELECT *, coalesce(starts_with(lower(name), 'nccl'), false) AS nccl FROM ({groups}) WHERE k = {KERNEL}"
    f = source.arrow(
        "SELECT total(n) AS kernels, total(n_api) AS launched, total(n_tiny) AS tiny, total(n_queue) AS queued, "
        "sum(occ_w) FILTER (WHERE NOT nccl) AS occ_w, sum(occ_t) FILTER (WHERE NOT nccl) AS occ_t, "
        f"CAST(coalesce(sum(occ_n) FILTER (WHERE NOT nccl), 0) AS BIGINT) AS occ_n FROM ({kernels})"
    ).to_pylist()[0]
    tiny = source.arrow(
        f"SELECT coalesce(name, 'None') AS name, isum(n_tiny) AS n, min(tiny_first) AS first FROM ({kernels}) "
        "WHERE n_tiny > 0 GROUP BY 1 ORDER BY n DESC, first LIMIT 3"
    ).to_pylist()
    limiters = source.arrow(
        f"SELECT limiter AS lim, total(occ_dur) AS t FROM ({kernels}) WHERE limiter IS NOT NULL AND NOT nccl "
        "AND occ_n > 0 GROUP BY 1 ORDER BY t DESC, lim"
    ).to_pylist()
    return LaunchFacts(
        kernels=int(f["kernels"]),
        launched=int(f["launched"]),
        shorter_than_launch=int(f["tiny"]),
        tiny_median_ns=_round(medians["tiny_med"]),
        launch_median_ns=_round(medians["api_med"]),
        tiny_names={str(r["name"]): int(r["n"]) for r in tiny},
        queue_median_ns=_round(medians["queue_med"]),
        queued=int(f["queued"]),
        occupancy_pct=float(f["occ_w"] / f["occ_t"]) if f["occ_t"] else None,
        occupancy_kernels=int(f["occ_n"]),
        occupancy_limiters={str(r["lim"]): int(r["t"]) for r in limiters},
    )


def _round(v: Any) -> int | None:
    return None if v is None else round(float(v))
