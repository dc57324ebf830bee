"""Host-blocking synchronisations, in SQL: which calls block, which of them stage a pageable copy,
and their count, time and causes per scope; and the allocator's peaks.

A sync is a CUDA/HIP call that blocks the calling host thread until the GPU catches up
(:data:`SYNC_CALL`), or a sync activity row whose call is not in the trace (CUPTI also records
syncs for ``cudaEventQuery``, which only polls: a row whose call is in the trace is that call).
Rows of type ``stream_wait_event`` block a stream, not the host. *Staging*: a stream synchronize
whose previous call on the same thread launched an HtoD copy from pageable (or unknown) memory,
as PyTorch's blocking ``.to(device)`` does, or a synchronous copy call that launched one itself;
every other sync is a *result wait*. A sync after which the host launched more GPU work
stalls the GPU's queue (``stalls``).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa

from traceconv.analyses.prepare import HOST_RANGES, NO_OP, host_names
from traceconv.analyses.results import CallTally, OpTally, StagingTally, Syncs, SyncTally
from traceconv.analyses.source import Source, literals, one_of
from traceconv.analyses.vocabulary import gpu_names

SYNC_CALL = re.compile(
    r"^(cuda|hip)(Stream|Device|Event|Ctx|Thread)Synchronize"
    r"|^cu(Stream|Ctx|Event)Synchronize"
    r"|^(cuda|hip|cu)Memcpy(?!.*Async)"
)
STREAM_SYNC = re.compile(r"^(cuda|hip|cu)StreamSynchronize")
_VERSION = re.compile(r"_v\d+$")  # nsys names calls with their ABI version: cudaMemcpy_v3020
TOP_OPS = 5
FIRST_BUCKET_NS = 1 << 16  # the time buckets that the call before a blocking one is searched in first
BUCKET_GROWS = 16


# The sync activity rows that stand for a sync of their own (see the module's docstring).
_SYNC_ROWS = (
    "SELECT coalesce(trace_id, '') AS trace_id, event_id, name, start_ns, end_ns, dur_ns, op_name FROM events "
    "WHERE kind = 'sync' AND (sync_type IS NULL OR sync_type <> 'stream_wait_event') "
    "AND NOT (correlation_id IS NOT NULL "
    # (the calls probe a hash of the sync rows' ids: far fewer than the calls)
    "AND correlation_id IN (SELECT a.correlation_id FROM events a SEMI JOIN (SELECT correlation_id FROM events "
    "WHERE kind = 'sync') y USING (correlation_id) WHERE a.kind = 'cuda_api' AND a.start_ns IS NOT NULL))"
)
# The spans of every sync (blocking calls and sync rows) and of every ended CUDA API call, for the
# busy sweep: ready once :func:`prepare_calls` has run (before the syncs are classified).
SYNC_SPANS = (
    "SELECT start_ns AS s, end_ns AS e FROM (SELECT start_ns, end_ns FROM blocking_calls UNION ALL "
    "SELECT start_ns, end_ns FROM sync_rows UNION ALL SELECT start_ns, end_ns FROM copy_waits) "
    "WHERE start_ns IS NOT NULL AND end_ns IS NOT NULL"
)
API_SPANS = "SELECT start_ns AS s, end_ns AS e FROM api_spans"
_CALLS = f"SELECT a.*, hash(a.trace_id, a.pid, a.tid) AS thread FROM ({HOST_RANGES}) a WHERE a.kind = 'cuda_api'"


# Copy calls that returned only after their own copy had ended: a copy to pageable memory (PyTorch's
# .cpu()) is synchronous whatever the call is named, and a staged copy may be too. For the busy
# sweep the host waits in them as in a sync; for the idle gaps, an HtoD one is staging.
def copy_waits(source: Source) -> str:
    """SQL: the copy calls that returned only after their own copy had ended (see above). The calls are
    read by the names that launch copies (a test of the few distinct names, not a join of every call)."""
    launches = {launch for kind, _, launch in gpu_names(source) if kind == "memcpy"}
    # a copy without its launch call's name: every call is a candidate (no copies at all: none is)
    named = "" if None in launches else f"AND {one_of('c.name', [n for n in launches if n is not None])} "
    return (
        "SELECT coalesce(c.trace_id, '') AS trace_id, c.event_id, c.start_ns, c.end_ns, c.op_name, "
        "bool_or(g.copy_kind = 'HtoD') AS staging FROM events g JOIN events c ON c.kind = 'cuda_api' "
        f"{named}AND c.event_id = g.launch_event_id AND coalesce(c.trace_id, '') = coalesce(g.trace_id, '') "
        "WHERE g.kind = 'memcpy' AND g.end_ns IS NOT NULL AND c.end_ns >= g.end_ns AND g.end_ns >= c.start_ns "
        "GROUP BY ALL"
    )


def prepare_calls(source: Source) -> None:
    """The tables ``api_names`` (the CUDA API calls' names), ``blocking_calls`` (the calls that
    block, with their names and thread), ``sync_rows`` (the sync activity rows that are syncs),
    ``copy_waits`` (:func:`copy_waits`) and ``api_spans`` (the start and end of every ended call:
    millions of rows, two integers each); :func:`classify` then makes ``sync_calls`` of them."""
    names = [n for k, n in host_names(source) if k == "cuda_api"]
    plain = [_VERSION.sub("", str(n)) if n is not None else "" for n in names]
    # the blocking calls by their names, as literals: the scan tests them once per distinct name, not per row
    blocking = literals(n for n, p in zip(names, plain, strict=True) if n and SYNC_CALL.match(p)) or "NULL"
    source.register(
        "api_names",
        pd.DataFrame(
            {
                "name": pd.Series(names, dtype=object),
                "plain": pd.Series(plain, dtype=object),
                "stream_sync": np.array([bool(STREAM_SYNC.match(p)) for p in plain], dtype=bool),  # typed when empty
            }
        ),
    )
    source.table(
        "blocking_calls",
        f"SELECT trace_id, event_id, name, start_ns, end_ns, dur_ns, op_name, thread FROM ({_CALLS}) "
        f"WHERE name IN ({blocking})",
    )
    source.table("sync_rows", _SYNC_ROWS)
    source.table("copy_waits", copy_waits(source))
    spans = f"SELECT start_ns, end_ns FROM ({HOST_RANGES}) WHERE kind = 'cuda_api' AND end_ns IS NOT NULL"
    source.table("api_spans", spans)


def blocking_ids(source: Source) -> npt.NDArray[np.int64]:
    """The event ids of the blocking calls, sorted (for the calls' pass, which finds the call
    before each of them where it reads every call in order: ``leaves.scan``)."""
    ids = source.arrow("SELECT DISTINCT event_id FROM blocking_calls ORDER BY event_id")["event_id"]
    return np.asarray(ids.to_numpy(zero_copy_only=False), np.int64)


def classify(source: Source, previous: pa.Table | None = None) -> None:
    """The table ``sync_calls``: every host-blocking sync of the input, classified (see the
    module). ``previous``: for each blocking call, the call before it on its thread (``event_id``,
    ``prev_id``, ``prev_dur``), found by the calls' pass of one trace; None: searched here
    (:func:`_previous_calls`), over a table of every call."""
    if previous is None:
        source.table("api_calls", f"SELECT event_id, start_ns, end_ns, dur_ns, thread FROM ({_CALLS})")
        _previous_calls(source)
        source.run("DROP TABLE api_calls")
    else:  # one trace: an event id names one call
        source.register("found_previous", previous)
        source.table(
            "previous_calls",
            "SELECT b.thread, p.event_id, p.prev_id, p.prev_dur FROM found_previous p "
            "JOIN blocking_calls b USING (event_id)",
        )
        source.con.unregister("found_previous")
    source.table(
        "sync_calls",
        "WITH staged AS (SELECT coalesce(trace_id, '') AS trace_id, launch_event_id AS event_id, "
        "isum(coalesce(bytes, 0)) AS size FROM events WHERE kind = 'memcpy' AND copy_kind = 'HtoD' "
        "AND (src_kind IS NULL OR src_kind IN ('Pageable', 'Unknown')) AND launch_event_id IS NOT NULL GROUP BY ALL), "
        "calls AS (SELECT a.*, o.prev_id, o.prev_dur, n.plain, n.stream_sync, own.size AS own_size, "
        "before.size AS prev_size FROM blocking_calls a "
        "LEFT JOIN previous_calls o ON o.event_id = a.event_id AND o.thread = a.thread "
        "JOIN api_names n ON n.name = a.name "
        "LEFT JOIN staged own ON own.trace_id = a.trace_id AND own.event_id = a.event_id "
        "LEFT JOIN staged before ON before.trace_id = a.trace_id AND before.event_id = o.prev_id) "
        "SELECT trace_id, event_id, plain AS name, start_ns, end_ns, dur_ns, op_name, "
        "own_size IS NOT NULL OR (stream_sync AND prev_size IS NOT NULL) AS staging, "
        "CASE WHEN own_size IS NOT NULL THEN own_size WHEN stream_sync THEN prev_size END AS copy_bytes, "
        "CASE WHEN own_size IS NULL AND stream_sync AND prev_size IS NOT NULL THEN coalesce(prev_dur, 0) "
        "ELSE 0 END AS copy_call_ns, false AS activity FROM calls "
        "UNION ALL SELECT trace_id, event_id, name, start_ns, end_ns, dur_ns, op_name, false, NULL, 0, true "
        "FROM sync_rows",
    )


def _previous_calls(source: Source) -> None:
    """The table ``previous_calls``: for each blocking call, the call before it on its thread (in
    (start, end, event id) order) and that call's duration.

    Not a window over every call (a sort of millions of rows): the calls of time buckets of
    :data:`FIRST_BUCKET_NS` ns, the blocking call's and the one before, are searched through a
    hash of the blocking calls, and the latest before it kept (an aggregate: no sort). A bucket
    holding a call before it holds the one right before it (no call lies between); a blocking
    call without one is searched again with buckets :data:`BUCKET_GROWS` times as wide, until a
    bucket spans the calls' whole time (then it has none).
    """
    source.run(
        "CREATE OR REPLACE TABLE previous_calls (thread UBIGINT, event_id BIGINT, prev_id BIGINT, prev_dur BIGINT)"
    )
    span = source.scalar("SELECT max(start_ns) - min(start_ns) FROM api_calls") or 0
    width = FIRST_BUCKET_NS
    pending = "SELECT thread, event_id, start_ns, coalesce(end_ns, 0) AS e FROM blocking_calls"
    while True:
        last = width > span
        source.run(
            f"INSERT INTO previous_calls WITH b AS ({pending}), "
            f"k AS (SELECT b.*, b.start_ns // {width} - d.d AS bucket FROM b, (VALUES (0), (1)) d(d)) "
            "SELECT thread, event_id, prev.id, prev.dur FROM (SELECT k.thread, k.event_id, "
            "arg_max(struct_pack(id := a.event_id, dur := a.dur_ns), "
            "struct_pack(s := a.start_ns, e := coalesce(a.end_ns, 0), id := a.event_id)) AS prev "
            "FROM api_calls a JOIN k "
            f"ON a.thread = k.thread AND a.start_ns // {width} = k.bucket "
            "WHERE a.start_ns < k.start_ns OR (a.start_ns = k.start_ns AND (coalesce(a.end_ns, 0) < k.e "
            "OR (coalesce(a.end_ns, 0) = k.e AND a.event_id < k.event_id))) GROUP BY ALL)"
        )
        if last:
            return
        pending = (
            "SELECT b.thread, b.event_id, b.start_ns, coalesce(b.end_ns, 0) AS e FROM blocking_calls b "
            "ANTI JOIN previous_calls p ON p.thread = b.thread AND p.event_id = b.event_id"
        )
        if not source.scalar(f"SELECT count(*) FROM ({pending})"):
            return
        width *= BUCKET_GROWS


def tally(source: Source, scoped: str, last_launch: int | None) -> Syncs:
    """Count and blocked time of the syncs in ``scoped`` (a query over ``sync_calls``), by call and by the
    operator that caused them, in all and for each kind."""
    calls = source.frame(
        "SELECT c.name, c.dur_ns, c.staging, c.copy_bytes, c.copy_call_ns, c.event_id, c.activity, "
        "coalesce(l.label, ?) AS op, coalesce(r.region, '') AS region, "
        "coalesce(c.end_ns < ?, false) AS stall "
        f"FROM ({scoped}) c LEFT JOIN labels l ON l.name = c.op_name "
        "LEFT JOIN regions r ON r.trace_id = c.trace_id AND r.event_id = c.event_id AND NOT c.activity "
        "ORDER BY c.activity, c.trace_id, c.event_id",
        [NO_OP, last_launch if last_launch is not None else -1],
    )
    staged = calls["staging"].to_numpy(bool)
    part = calls[staged]
    return Syncs(
        **_tally(calls),
        result_waits=SyncTally(**_tally(calls[~staged])),
        staging=StagingTally(
            **_tally(part),
            bytes=int(part["copy_bytes"].fillna(0).sum()),
            copy_call_ns=int(part["copy_call_ns"].sum()),
        ),
    )


def _tally(calls: pd.DataFrame) -> dict[str, Any]:
    """The fields of a :class:`SyncTally` for ``calls``."""
    by_call = calls.groupby("name", sort=False)["dur_ns"].agg(["size", "sum"]).sort_values("sum", ascending=False)
    g = calls.groupby(["op", "region"], sort=False)
    ops = g["dur_ns"].agg(["size", "sum"]).sort_values(["sum", "size"], ascending=False).head(TOP_OPS)
    return {
        "count": len(calls),
        "dur_ns": int(calls["dur_ns"].fillna(0).sum()),
        "stalls": int(calls["stall"].sum()),
        "calls": [CallTally(str(n), int(r["size"]), int(r["sum"])) for n, r in by_call.iterrows()],
        "ops": [
            OpTally(str(op), str(region) if region and region != op else None, int(r["size"]), int(r["sum"]))
            for (op, region), r in ops.iterrows()
        ],
    }
