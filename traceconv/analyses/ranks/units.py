"""The ranks of an input and each one's GPU time: compute, communication, copies, idle, overlap.

A rank's GPU rows are read on their own (one query per rank, three columns), so memory follows
the largest rank, not the input. Communication is a kernel whose name is NCCL's or RCCL's, or
that PyTorch marks with a ``Collective name`` (on the kernel or on the ``record_param_comms`` /
``c10d::`` operator that launched it); every other kernel is compute; memcpy and memset are copies.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceconv.analyses import intervals as I
from traceconv.analyses.prepare import launched, one_offs
from traceconv.analyses.ranks.model import Breakdown
from traceconv.analyses.source import Source
from traceconv.analyses.steps import Steps, host_steps, lived, step_label, step_regex

IDENTITY = ("trace_id", "pid", "device", "rank", "source")


def comm_sql(source: Source) -> str:
    """The condition that a row is a communication kernel (columns a table lacks are left out)."""
    terms = ["lower(name) LIKE '%nccl%'", "lower(name) LIKE '%rccl%'"]
    if source.has("args"):
        terms.append("json_extract_string(args, '$.\"Collective name\"') IS NOT NULL")
    if source.has("op_name"):
        terms.append("op_name = 'record_param_comms' OR op_name LIKE 'c10d::%'")
    return f"(kind = 'kernel' AND ({' OR '.join(terms)}))"


def class_sql(source: Source) -> str:
    return f"CASE WHEN kind <> 'kernel' THEN 2 WHEN {comm_sql(source)} THEN 1 ELSE 0 END"  # compute, comm, copy


UNIT_SQL = "trace_id IS NOT DISTINCT FROM ? AND pid IS NOT DISTINCT FROM ? AND device IS NOT DISTINCT FROM ?"
GPU_KINDS = "kind IN ('kernel', 'memcpy', 'memset', 'graph') AND start_ns IS NOT NULL AND end_ns IS NOT NULL"


@dataclass(frozen=True)
class Unit:
    """One rank's GPU: the key of its GPU rows (trace, GPU rows' pid, device), and who it is."""

    trace_id: str | None
    gpu_pid: int | None
    device: int | None
    rank: int | None
    pid: int | None  # the host process
    source: str

    @property
    def key(self) -> list[object]:
        return [self.trace_id, self.gpu_pid, self.device]

    many_devices: bool = False  # the same rank (or process) drives several GPUs: labels name the device

    @property
    def label(self) -> str:
        base = str(self.rank) if self.rank is not None else f"{self.trace_id}:{self.pid}"
        return f"{base}/gpu{self.device}" if self.many_devices else base


def count(source: Source) -> int:
    """How many :func:`units` the input has (one per trace, process and device with GPU rows), without
    finding out who each one is."""
    c = {name: name if source.has(name) else "NULL" for name in IDENTITY}
    return int(
        source.scalar(
            f"SELECT count(*) FROM (SELECT DISTINCT {c['trace_id']}, {c['pid']}, {c['device']} "
            f"FROM events WHERE {GPU_KINDS})"
        )
    )


def units(source: Source) -> list[Unit]:
    """Every (trace, process, device) with GPU rows, in rank order (ranks without a number last)."""
    c = {name: name if source.has(name) else "NULL" for name in IDENTITY}
    df = source.frame(
        f"WITH g AS (SELECT {c['trace_id']} AS trace_id, {c['pid']} AS pid, {c['device']} AS device, "
        f"any_value({c['rank']}) AS rank, any_value({c['source']}) AS source "
        f"FROM events WHERE {GPU_KINDS} GROUP BY ALL), "
        f"h AS (SELECT {c['trace_id']} AS trace_id, mode({c['pid']}) AS host_pid FROM events "
        "WHERE kind = 'cuda_api' GROUP BY ALL) "
        "SELECT g.*, h.host_pid FROM g LEFT JOIN h ON h.trace_id IS NOT DISTINCT FROM g.trace_id"
    )
    out = [
        Unit(
            trace_id=_opt_str(r.trace_id),
            gpu_pid=_opt_int(r.pid),
            device=_opt_int(r.device),
            rank=_opt_int(r.rank),
            pid=_opt_int(r.pid) if r.source == "nsys" else _opt_int(r.host_pid),
            source=str(r.source),
        )
        for r in df.itertuples(index=False)
    ]
    seen: dict[str, int] = {}
    for u in out:
        seen[u.label] = seen.get(u.label, 0) + 1
    out = [dataclasses.replace(u, many_devices=True) if seen[u.label] > 1 else u for u in out]
    return sorted(out, key=lambda u: (u.rank is None, u.rank or 0, str(u.trace_id), u.pid or 0, u.device or 0))


@dataclass(frozen=True)
class GpuRows:
    """One rank's GPU rows as three unions: compute, communication and copies."""

    start_ns: int
    end_ns: int
    compute: tuple[I.I64, I.I64]
    comm: tuple[I.I64, I.I64]
    copy: tuple[I.I64, I.I64]


def gpu_rows(source: Source, unit: Unit) -> GpuRows:
    rows = source.arrow(
        f"SELECT start_ns, end_ns, {class_sql(source)} AS c FROM events WHERE {GPU_KINDS} AND {UNIT_SQL}", unit.key
    )
    s = rows["start_ns"].to_numpy().astype(np.int64)
    e = rows["end_ns"].to_numpy().astype(np.int64)
    c = rows["c"].to_numpy().astype(np.int64)
    parts = [I.union(s[c == k], e[c == k]) for k in range(3)]
    return GpuRows(
        start_ns=int(s.min()) if len(s) else 0,
        end_ns=int(e.max()) if len(e) else 0,
        compute=parts[0],
        comm=parts[1],
        copy=parts[2],
    )


def breakdown(rows: GpuRows, windows: tuple[I.I64, I.I64]) -> Breakdown:
    """The rank's figures inside ``windows`` (sorted, disjoint segments)."""
    compute, comm, copy = (_clip(p, windows) for p in (rows.compute, rows.comm, rows.copy))
    window_ns = int((windows[1] - windows[0]).sum())
    comm_ns = _length(comm)
    overlap_ns = I.overlap(comm, compute)
    busy = I.length(np.concatenate([compute[0], comm[0], copy[0]]), np.concatenate([compute[1], comm[1], copy[1]]))
    return Breakdown(
        window_ns=window_ns,
        compute_ns=_length(compute),
        comm_ns=comm_ns,
        copy_ns=_length(copy),
        idle_ns=window_ns - busy,
        overlap_ns=overlap_ns,
        overlap_pct=round(overlap_ns * 100.0 / comm_ns, 2) if comm_ns else None,
        exposed_comm_ns=comm_ns - overlap_ns,
    )


def unit_steps(source: Source, unit: Unit, pattern: str) -> Steps | None:
    """The steps of the rank's process (its trace; in an nsys export, its process's ranges)."""
    regex = step_regex(pattern)
    where = "trace_id IS NOT DISTINCT FROM ?" + (" AND pid IS NOT DISTINCT FROM ?" if unit.source == "nsys" else "")
    where += " AND kind IN ('cpu_op', 'nvtx') AND device IS NULL AND start_ns IS NOT NULL AND end_ns IS NOT NULL"
    params: list[object] = [unit.trace_id] + ([unit.pid] if unit.source == "nsys" else [])
    names = source.arrow(f"SELECT DISTINCT name FROM events WHERE {where}", params)["name"].to_pylist()
    steps = [n for n in names if n is not None and regex.search(str(n))]
    if not steps:
        return None
    marks = ", ".join("?" for _ in steps)
    ranges = source.frame(
        "SELECT name, start_ns, end_ns, coalesce(trace_id, '') AS trace_id, coalesce(pid, -1) AS pid, "
        f"coalesce(tid, -1) AS tid FROM events WHERE {where} AND name IN ({marks}) ORDER BY event_id",
        [*params, *steps],
    )
    host = host_steps(ranges.assign(label=ranges["name"].astype(str).map(step_label), is_step=True))
    return lived(host, launched(source, host), one_offs(source)) if host is not None else None


def _clip(segs: tuple[I.I64, I.I64], windows: tuple[I.I64, I.I64]) -> tuple[I.I64, I.I64]:
    """The parts of sorted, disjoint segments inside sorted, disjoint windows."""
    s, e = segs
    ws, we = windows
    if not len(s) or not len(ws):
        return np.empty(0, np.int64), np.empty(0, np.int64)
    # every pair of a segment and a window that overlap (both sorted: the pairs are contiguous ranges)
    lo = np.searchsorted(we, s, side="right")
    hi = np.searchsorted(ws, e, side="left")
    count = np.maximum(hi - lo, 0)
    seg = np.repeat(np.arange(len(s)), count)
    win = np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count) + np.repeat(lo, count)
    cs, ce = np.maximum(s[seg], ws[win]), np.minimum(e[seg], we[win])
    ok = ce > cs
    return cs[ok], ce[ok]


def _length(segs: tuple[I.I64, I.I64]) -> int:
    return int((segs[1] - segs[0]).sum())


def _opt_int(v: object) -> int | None:
    return None if v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v)) else int(v)  # type: ignore[call-overload]


def _opt_str(v: object) -> str | None:
    return None if v is None or v is pd.NA else str(v)
