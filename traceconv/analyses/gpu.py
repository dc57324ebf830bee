"""The GPU rows of a scope, aggregated in SQL: kernels per name, copies per direction, launch figures.

A GPU row belongs to a scope by its anchor: the start of the call that launched it, or its own
start when the launch is not in the trace. ``occupancy_pct`` (the computed estimate, else the
theoretical occupancy, else Kineto's figure) is weighted by execution time;
NCCL kernels (which occupy SMs while they wait) are left out of the occupancy figure.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from traceconv.analyses.prepare import NO_OP
from traceconv.analyses.results import Copies, CopyOpTally, LaunchFacts
from traceconv.analyses.source import Source, Within

TOP_OPS = 5
GPU = (
    "SELECT coalesce(trace_id, '') AS trace_id, event_id, kind, name, short_name, start_ns, end_ns, dur_ns, device, "
    "launch_event_id, launch_start_ns, launch_end_ns, queue_ns, op_event_id, op_name, bytes, "
    # occupancy: computed from the launch configuration (est, else theoretical), else Kineto's figure
    "coalesce(est_occupancy_pct, theoretical_occupancy_pct, occupancy_pct) AS occupancy_pct, occupancy_limiter, "
    "copy_kind, src_kind, dst_kind, coalesce(launch_start_ns, start_ns) AS anchor FROM events "
    "WHERE kind IN ('kernel', 'memcpy', 'memset')"
)


# What the scopes' queries read of each GPU row, with one flag per scope (see :func:`scoped_rows`),
# numbers only: its texts of many values are kept as hashes (``name_h``, ``short_h``, ``op_h``,
# ``limiter_h``; texts in ``gpu_texts``), its kind as a code (:data:`KERNEL`, ...); a table of
# numbers is a third of the time and size of one with the texts. What only copies have (their
# direction, memory kinds and trace) is in a table of the copies (:data:`COPY_COLUMNS`).
KERNEL, MEMCPY, MEMSET = 0, 1, 2
SCOPED_COLUMNS = (
    f"event_id, CAST(CASE kind WHEN 'kernel' THEN {KERNEL} WHEN 'memcpy' THEN {MEMCPY} ELSE {MEMSET} END AS UTINYINT) "
    "AS k, th(name) AS name_h, th(short_name) AS short_h, device, start_ns, end_ns, dur_ns, launch_start_ns, "
    "launch_end_ns, queue_ns, occupancy_pct, th(CAST(occupancy_limiter AS VARCHAR)) AS limiter_h"
)
COPY_COLUMNS = "trace_id, event_id, dur_ns, th(op_name) AS op_h, bytes, copy_kind, src_kind, dst_kind"
_TEXTS = " UNION ".join(
    f"SELECT {c} AS text FROM ({GPU})" for c in ("name", "short_name", "op_name", "CAST(occupancy_limiter AS VARCHAR)")
)
SALTS = 8  # hashes tried, each with another salt, until no two of the texts share one


def prepare_texts(source: Source) -> None:
    """The table ``gpu_texts`` (``h``: the hash of ``text``; ``nccl``: a NCCL kernel's name) and the
    macro ``th(x)``, the hash of a text of the GPU rows (null stays null), with the first salt that
    gives each of their texts a hash of its own (a 64-bit hash: the first one, but for a collision)."""
    source.table("gpu_text_values", f"SELECT text FROM ({_TEXTS}) WHERE text IS NOT NULL")
    for salt in range(SALTS):
        source.table(
            "gpu_texts",
            f"SELECT hash(text, {salt}) AS h, text, starts_with(lower(text), 'nccl') AS nccl FROM gpu_text_values",
        )
        if source.scalar("SELECT count(DISTINCT h) = count(*) FROM gpu_texts"):
            source.run("DROP TABLE gpu_text_values")
            source.run(f"CREATE OR REPLACE MACRO th(x) AS CASE WHEN x IS NULL THEN NULL ELSE hash(x, {salt}) END")
            return
    raise RuntimeError(f"{SALTS} hashes of the GPU rows' texts all collide")  # 64-bit: never


def scoped_rows(withins: list[Within]) -> str:
    """The GPU rows with what the scopes' queries read, and ``in_K``: whether the row's anchor lies in
    scope K (``withins[K]``, of :meth:`Source.within`). Materialised once, so that each scope's
    aggregates scan a table of the Source's database instead of the Parquet, each joining the
    windows again. Needs :func:`prepare_texts`."""
    return _flagged(SCOPED_COLUMNS, f"({GPU})", withins)


def scoped_copies(withins: list[Within]) -> str:
    """The copies (memcpy rows) as :func:`scoped_rows` has the GPU rows, with what copies have."""
    return _flagged(COPY_COLUMNS, f"(SELECT * FROM ({GPU}) WHERE kind = 'memcpy')", withins)


def _flagged(columns: str, rows: str, withins: list[Within]) -> str:
    flags = "".join(f", {w.test('g.anchor')} AS in_{k}" for k, w in enumerate(withins))
    return f"SELECT {columns}{flags} FROM {rows} g{''.join(w.join('g.anchor') for w in withins)}"


def scope_rows(table: str, k: int) -> str:
    """The rows of scope ``k`` of a :func:`scoped_rows` or :func:`scoped_copies` table."""
    return f"SELECT * FROM {table} WHERE in_{k}"


def in_scope(rows_sql: str, within: Within, time: str) -> str:
    """The rows of ``rows_sql`` whose ``time`` lies in the scope's windows."""
    return f"SELECT r.* FROM ({rows_sql}) r{within.join(f'r.{time}')} WHERE {within.test(f'r.{time}')}"


def gpu_time(source: Source, scoped: str) -> int:
    return int(source.scalar(f"SELECT total(dur_ns) FROM ({scoped})"))


def kernel_table(source: Source, scoped: str) -> pd.DataFrame:
    """Kernels per name: count, execution total and mean, queue total and mean, share of the kernels' time."""
    out = source.frame(
        # per hash of the name, then per name as shown (a kernel named "(unnamed)" and unnamed ones are one)
        "WITH g AS (SELECT name_h, count(*) AS count, total(dur_ns) AS dur_ns, total(queue_ns) AS queue_ns, "
        "count(queue_ns) AS queued, arg_min(short_h, event_id) FILTER (WHERE short_h IS NOT NULL) AS short_h, "
        "min(event_id) FILTER (WHERE short_h IS NOT NULL) AS short_first, "
        "sum(occupancy_pct * CAST(coalesce(dur_ns, 0) AS DOUBLE)) FILTER (WHERE occupancy_pct IS NOT NULL) AS occ_w, "
        "sum(CAST(coalesce(dur_ns, 0) AS DOUBLE)) FILTER (WHERE occupancy_pct IS NOT NULL) AS occ_t "
        f"FROM ({scoped}) WHERE k = {KERNEL} GROUP BY 1) "
        "SELECT coalesce(n.text, '(unnamed)') AS name, isum(g.count) AS count, isum(g.dur_ns) AS dur_ns, "
        "isum(g.queue_ns) AS queue_ns, isum(g.queued) AS queued, arg_min(s.text, g.short_first) AS short_name, "
        "sum(g.occ_w) AS occ_w, sum(g.occ_t) AS occ_t FROM g LEFT JOIN gpu_texts n ON n.h = g.name_h "
        "LEFT JOIN gpu_texts s ON s.h = g.short_h GROUP BY 1"
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
        f"FROM ({copies_sql}) c LEFT JOIN gpu_texts o ON o.h = c.op_h LEFT JOIN labels l ON l.name = o.text "
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


def launch_facts(source: Source, scoped: str) -> LaunchFacts:
    """Kernel launch figures: queue median, kernels shorter than their own launch call, occupancy."""
    f = source.arrow(
        "WITH k AS (SELECT coalesce(n.nccl, false) AS nccl, dur_ns, queue_ns, occupancy_pct, "
        f"launch_end_ns - launch_start_ns AS api FROM ({scoped}) s LEFT JOIN gpu_texts n ON n.h = s.name_h "
        f"WHERE k = {KERNEL}) SELECT count(*) AS kernels, count(api) AS launched, "
        "count(*) FILTER (WHERE dur_ns < api) AS tiny, median(dur_ns) FILTER (WHERE dur_ns < api) AS tiny_med, "
        "median(api) AS api_med, median(queue_ns) AS queue_med, count(queue_ns) AS queued, "
        "sum(occupancy_pct * CAST(coalesce(dur_ns, 0) AS DOUBLE)) FILTER (WHERE occ) AS occ_w, "
        "sum(CAST(coalesce(dur_ns, 0) AS DOUBLE)) FILTER (WHERE occ) AS occ_t, count(*) FILTER (WHERE occ) AS occ_n "
        "FROM (SELECT *, occupancy_pct IS NOT NULL AND NOT nccl AS occ FROM k)"
    ).to_pylist()[0]
    tiny = source.arrow(
        f"WITH g AS (SELECT name_h, count(*) AS n, min(event_id) AS first FROM ({scoped}) "
        f"WHERE k = {KERNEL} AND dur_ns < launch_end_ns - launch_start_ns GROUP BY 1) "
        "SELECT coalesce(t.text, 'None') AS name, isum(g.n) AS n, min(g.first) AS first FROM g "
        "LEFT JOIN gpu_texts t ON t.h = g.name_h GROUP BY 1 ORDER BY n DESC, first LIMIT 3"
    ).to_pylist()
    return LaunchFacts(
        kernels=int(f["kernels"]),
        launched=int(f["launched"]),
        shorter_than_launch=int(f["tiny"]),
        tiny_median_ns=_round(f["tiny_med"]),
        launch_median_ns=_round(f["api_med"]),
        tiny_names={str(r["name"]): int(r["n"]) for r in tiny},
        queue_median_ns=_round(f["queue_med"]),
        queued=int(f["queued"]),
        occupancy_pct=float(f["occ_w"] / f["occ_t"]) if f["occ_t"] else None,
        occupancy_kernels=int(f["occ_n"]),
        occupancy_limiters=occupancy_limiters(source, scoped),
    )


def occupancy_limiters(source: Source, scoped: str) -> dict[str, int]:
    """Execution time of the occupancy-judged kernels (not NCCL) per limiter, largest first."""
    rows = source.arrow(
        "SELECT t.text AS lim, total(s.dur_ns) AS t "
        f"FROM ({scoped}) s LEFT JOIN gpu_texts n ON n.h = s.name_h JOIN gpu_texts t ON t.h = s.limiter_h "
        f"WHERE s.k = {KERNEL} AND s.occupancy_pct IS NOT NULL AND NOT coalesce(n.nccl, false) "
        "GROUP BY 1 ORDER BY t DESC, lim"
    ).to_pylist()
    return {str(r["lim"]): int(r["t"]) for r in rows}


def _round(v: Any) -> int | None:
    return None if v is None else round(float(v))
