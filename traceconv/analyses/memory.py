"""Where the memory went: each device's allocated and reserved memory over time, its peak, and
which operators' allocations were live at the peak; out of core, in SQL over ``events``.

Memory rows are allocator events: PyTorch's ``[memory]`` (``profile_memory=True``: signed
``bytes``, the allocator's ``total_allocated_bytes`` and ``total_reserved_bytes`` after the event,
the address in ``args`` as ``Addr``) and Nsight Systems' ``CUDA_GPU_MEMORY_USAGE_EVENTS``
(``--cuda-memory-usage=true``: the driver's allocations, a running total, no reserved figure, the
address as ``address``). Events are ordered by ``(start_ns, event_id)``; the peak is the first
event at which ``total_allocated_bytes`` is highest.

An allocation is live at the peak when it came at or before the peak event and the next event
at its address (a free, or a new allocation there: the free went unrecorded) comes after it.
Its holder is, for PyTorch, the innermost CPU operator or annotation on its thread that encloses
it, allocation primitives (``aten::empty`` ...) aside; for Nsight Systems, the NVTX range of the
CUDA call that made it (``correlation_id``), else that call. Nothing else is guessed: memory
allocated before the trace began is counted as such (``before_trace_bytes``: the peak minus the
live allocations the trace saw), and an allocation with no operator or call is ``(no operator)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from traceconv.analyses.prepare import NO_OP
from traceconv.analyses.results import MemoryHolder, MemoryPeak, MemoryPoint
from traceconv.analyses.source import Source
from traceconv.analyses.steps import Steps

POINTS = 64  # buckets of the series over time, per device
TOP_HOLDERS = 10
# Operators that only allocate: the memory belongs to the operator around them.
PRIMITIVES = (
    *("aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty", "aten::new_empty_strided"),
    *("aten::resize_", "aten::as_strided", "aten::set_"),
)
_MEM = "traceconv_memory"
_PEAKS = "traceconv_memory_peaks"


def memory(
    source: Source, steps: Steps | None = None, top: int = TOP_HOLDERS, origin: int | None = None
) -> dict[str, MemoryPeak]:
    """Per device (``cpu`` for host memory; ``trace/device`` for several traces): its peak (also
    as time since ``origin``, the window's start), the holders at the peak (``top`` of them, 0:
    all), the allocated memory at the end of each step, and a series of at most :data:`POINTS` buckets."""
    if not source.scalar("SELECT count(*) FROM events WHERE kind = 'memory' AND start_ns IS NOT NULL"):
        return {}
    _rows(source)
    source.table(
        _PEAKS,
        f"SELECT key, start_ns, event_id, alloc, resv FROM (SELECT *, row_number() OVER (PARTITION BY key "
        f"ORDER BY alloc DESC, start_ns, event_id) AS rn FROM {_MEM} WHERE alloc IS NOT NULL) WHERE rn = 1",
    )
    holders = _holders(source, top)
    series = _series(source)
    ends = _step_ends(source, steps)
    live = {str(r["key"]): int(r["live"]) for r in _live_totals(source)}
    out = {}
    for r in source.arrow(
        f"SELECT p.key, p.start_ns, p.alloc, p.resv, (SELECT max(resv) FROM {_MEM} m WHERE m.key = p.key) AS top_resv "
        f"FROM {_PEAKS} p ORDER BY p.key"
    ).to_pylist():
        key = str(r["key"])
        out[key] = MemoryPeak(
            allocated_peak_bytes=int(r["alloc"]),
            reserved_peak_bytes=None if r["top_resv"] is None else int(r["top_resv"]),
            peak_ns=int(r["start_ns"]),
            peak_offset_ns=None if origin is None else int(r["start_ns"]) - origin,
            reserved_at_peak_bytes=None if r["resv"] is None else int(r["resv"]),
            live_bytes=live.get(key, 0),
            before_trace_bytes=int(r["alloc"]) - live.get(key, 0),
            holders=holders.get(key, []),
            step_end_bytes=ends.get(key, []),
            series=series.get(key, []),
        )
    return out


def _rows(source: Source) -> None:
    """The memory rows, keyed by device, with their address and memory kind."""
    traces = int(source.scalar("SELECT count(DISTINCT trace_id) FROM events WHERE kind = 'memory'") or 0)
    dev = "coalesce(CAST(device AS VARCHAR), 'cpu')"
    key = f"coalesce(trace_id, '') || '/' || {dev}" if traces > 1 else dev
    source.table(
        _MEM,
        f"SELECT {key} AS key, coalesce(trace_id, '') AS trace_id, event_id, start_ns, bytes, "
        "total_allocated_bytes AS alloc, total_reserved_bytes AS resv, pid, tid, correlation_id, "
        "coalesce(json_extract_string(args, '$.Addr'), json_extract_string(args, '$.address')) AS addr, "
        "json_extract_string(args, '$.memKind') AS mem_kind "
        "FROM events WHERE kind = 'memory' AND start_ns IS NOT NULL",
    )


_LIVE = f"""
WITH o AS (
    SELECT m.*, lead(start_ns) OVER w AS next_ns, lead(event_id) OVER w AS next_id FROM {_MEM} m
    WHERE addr IS NOT NULL WINDOW w AS (PARTITION BY key, addr ORDER BY start_ns, event_id))
SELECT o.* FROM o JOIN {_PEAKS} p USING (key)
WHERE o.bytes > 0
  AND (o.start_ns < p.start_ns OR (o.start_ns = p.start_ns AND o.event_id <= p.event_id))
  AND (o.next_ns IS NULL OR o.next_ns > p.start_ns OR (o.next_ns = p.start_ns AND o.next_id > p.event_id))
"""


def _live_totals(source: Source) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = source.arrow(
        f"SELECT key, total(bytes) AS live FROM ({_LIVE}) GROUP BY key"
    ).to_pylist()
    return rows


def _holders(source: Source, top: int) -> dict[str, list[MemoryHolder]]:
    """The live allocations at each peak, by the operator (or call) that made them."""
    primitives = ", ".join(f"'{p}'" for p in PRIMITIVES)
    sql = f"""
    WITH live AS ({_LIVE}),
    ranges AS (
        SELECT coalesce(trace_id, '') AS trace_id, pid, tid, start_ns, end_ns, dur_ns, name FROM events
        WHERE kind IN ('cpu_op', 'nvtx') AND device IS NULL AND name NOT IN ({primitives})),
    enclosing AS (
        SELECT l.key, l.event_id, arg_max(r.name, {{'s': r.start_ns, 'd': -coalesce(r.dur_ns, 0)}}) AS op
        FROM live l JOIN ranges r
        ON r.trace_id = l.trace_id AND r.pid = l.pid AND r.tid = l.tid
           AND r.start_ns <= l.start_ns AND coalesce(r.end_ns, l.start_ns) >= l.start_ns
        GROUP BY l.key, l.event_id),
    calls AS (
        SELECT coalesce(trace_id, '') AS trace_id, correlation_id, any_value(op_name) AS op_name,
               any_value(name) AS name FROM events
        WHERE kind = 'cuda_api' AND correlation_id IN (SELECT correlation_id FROM live) GROUP BY ALL),
    named AS (
        SELECT l.key, l.bytes, coalesce(e.op, c.op_name, c.name, '{NO_OP}')
               || CASE WHEN l.mem_kind IS NULL OR l.mem_kind = 'Device' THEN '' ELSE ' [' || l.mem_kind || ']' END
               AS name
        FROM live l LEFT JOIN enclosing e ON e.key = l.key AND e.event_id = l.event_id
        LEFT JOIN calls c ON c.trace_id = l.trace_id AND c.correlation_id = l.correlation_id)
    SELECT key, name, total(bytes) AS bytes, count(*) AS count FROM named GROUP BY ALL
    ORDER BY key, bytes DESC, name
    """
    out: dict[str, list[MemoryHolder]] = {}
    for r in source.arrow(sql).to_pylist():
        held = out.setdefault(str(r["key"]), [])
        if not top or len(held) < top:
            held.append(MemoryHolder(str(r["name"]), int(r["bytes"]), int(r["count"])))
    return out


def _series(source: Source) -> dict[str, list[MemoryPoint]]:
    """Per device, at most :data:`POINTS` buckets of equal time: the highest allocated and reserved in each."""
    sql = f"""
    WITH span AS (SELECT key, min(start_ns) AS t0, greatest((max(start_ns) - min(start_ns)) // {POINTS} + 1, 1) AS w
                  FROM {_MEM} GROUP BY key)
    SELECT m.key, s.t0 + (m.start_ns - s.t0) // s.w * s.w AS start_ns, max(m.alloc) AS alloc, max(m.resv) AS resv
    FROM {_MEM} m JOIN span s USING (key) GROUP BY ALL ORDER BY m.key, start_ns
    """
    out: dict[str, list[MemoryPoint]] = {}
    for r in source.arrow(sql).to_pylist():
        resv = None if r["resv"] is None else int(r["resv"])
        alloc = 0 if r["alloc"] is None else int(r["alloc"])
        out.setdefault(str(r["key"]), []).append(MemoryPoint(int(r["start_ns"]), alloc, resv))
    return out


def _step_ends(source: Source, steps: Steps | None) -> dict[str, list[int]]:
    """Per device, the allocated memory at the end of each step (after the last event before it ends)."""
    if steps is None or not steps.count:
        return {}
    source.register(
        "traceconv_step_ends", pa.table({"i": np.arange(steps.count, dtype=np.int64), "end_ns": steps.end_ns})
    )
    sql = f"""
    WITH k AS (SELECT DISTINCT key FROM {_MEM}),
    s AS (SELECT k.key, e.i, e.end_ns FROM k CROSS JOIN traceconv_step_ends e),
    m AS (SELECT key, start_ns, arg_max(alloc, event_id) AS alloc FROM {_MEM} WHERE alloc IS NOT NULL GROUP BY ALL)
    SELECT s.key, s.i, m.alloc FROM s ASOF JOIN m ON m.key = s.key AND m.start_ns <= s.end_ns ORDER BY s.key, s.i
    """
    out: dict[str, list[int]] = {}
    for r in source.arrow(sql).to_pylist():
        out.setdefault(str(r["key"]), []).append(int(r["alloc"]))
    return out


def growth(ends: list[int]) -> float | None:
    """Bytes a step by which the allocated memory at the end of a step grows, when it never
    shrinks from one step's end to the next and grows at half of them or more (None: fewer than
    three steps, or not so). Not at every step: Nsight Systems sees the device memory the caching
    allocator reserves, which a leak grows in blocks, a step or two at a time."""
    if len(ends) < 3:
        return None
    diffs = np.diff(np.asarray(ends, dtype=np.int64))
    if (diffs < 0).any() or 2 * int((diffs > 0).sum()) < len(diffs):
        return None
    return float(ends[-1] - ends[0]) / (len(ends) - 1)


def notes(source: Source, memory: dict[str, MemoryPeak]) -> list[str]:
    """What a reader of the memory figures should know: what Nsight Systems' figures are."""
    out = []
    if source.scalar("SELECT count(*) FROM events WHERE kind = 'memory' AND source = 'nsys'"):
        out.append(
            "Nsight Systems' memory rows are the CUDA driver's allocations (cudaMalloc; cudaHostAlloc's pinned host "
            "memory counts in the device's total): for a PyTorch program, what its caching allocator reserved, "
            "not what its tensors hold; there is no reserved figure, so no FRAGMENTATION"
        )
    return out
