"""Host/device copies, host-blocking synchronisations and allocator peaks (pure: frames in, dicts out)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from traceconv.analyses.prepare import NO_OP
from traceconv.analyses.results import (
    CallTally,
    Copies,
    CopyOpTally,
    MemoryPeak,
    OpTally,
    StagingTally,
    Syncs,
    SyncTally,
)

# CUDA/HIP calls that block the calling host thread until the GPU catches up. Asynchronous
# copies are left out (from pageable memory they are partly synchronous, and PyTorch follows
# them with an explicit stream synchronize anyway); cudaStreamWaitEvent blocks a stream, not the host.
SYNC_CALL = re.compile(
    r"^(cuda|hip)(Stream|Device|Event|Ctx|Thread)Synchronize"
    r"|^cu(Stream|Ctx|Event)Synchronize"
    r"|^(cuda|hip|cu)Memcpy(?!.*Async)"
)
# The sync PyTorch's blocking copy_ issues right after cudaMemcpyAsync from pageable memory
# (at::cuda::memcpy_and_sync); a device synchronize there is the user's, a wait for everything.
STREAM_SYNC = re.compile(r"^(cuda|hip|cu)StreamSynchronize")
STAGED_FROM = ("Pageable", "Unknown")  # host memory a copy is staged from (null: unknown too)
_VERSION = re.compile(r"_v\d+$")  # nsys names calls with their ABI version: cudaMemcpy_v3020
HOST_KINDS = ("Pageable", "Pinned")
_TOP_OPS = 5


def _matches(names: pd.Series, pattern: re.Pattern[str]) -> Any:
    """``pattern.match`` per name as a bool array, computed once per distinct name."""
    return names.map({n: bool(pattern.match(n)) for n in pd.unique(names)}).to_numpy(bool)


def copies(gpu: pd.DataFrame) -> dict[str, Copies]:
    """Per copy direction: count, bytes, time, bandwidth, share of GPU time, host memory kind, issuing ops."""
    memcpy = gpu[gpu["kind"] == "memcpy"]
    gpu_ns = int(gpu["dur_ns"].fillna(0).sum())
    direction = memcpy["copy_kind"].astype(object).fillna("Unknown")
    out: dict[str, Copies] = {}
    for kind, part in memcpy.groupby(direction, sort=True):
        dur, size = int(part["dur_ns"].fillna(0).sum()), int(part["bytes"].fillna(0).sum())
        src, dst = part["src_kind"].astype(object), part["dst_kind"].astype(object)
        on = {host: int(((src == host) | (dst == host)).sum()) for host in HOST_KINDS}
        out[str(kind)] = Copies(
            count=len(part),
            bytes=size,
            dur_ns=dur,
            bandwidth_gbps=round(size / dur, 2) if dur else None,
            gpu_time_pct=round(dur * 100.0 / gpu_ns, 2) if gpu_ns else 0.0,
            pageable_count=on["Pageable"],
            pinned_count=on["Pinned"],
            ops=_copy_ops(part),
        )
    return out


def sync_calls(ranges: pd.DataFrame, sync: pd.DataFrame, gpu: pd.DataFrame) -> pd.DataFrame:
    """Every host-blocking synchronisation: CUDA API calls, and sync activity rows with no call in the trace.

    Columns: ``name``, ``start_ns``, ``end_ns``, ``dur_ns``, ``op_name``, ``region``, and
    ``staging``, ``copy_bytes``, ``copy_call_ns`` from :func:`staging`. An activity row whose
    call is in the trace is that call: counted once, if the call blocks (CUPTI also records
    syncs for ``cudaEventQuery``, which only polls). Rows of type ``stream_wait_event`` block
    a stream, not the host, and are left out; the others have no thread, so they count as
    result waits.
    """
    api = ranges[ranges["kind"] == "cuda_api"].reset_index(drop=True)
    names = api["name"].astype(object).fillna("")
    plain = names.map({n: _VERSION.sub("", str(n)) for n in pd.unique(names)})
    blocks = _matches(plain, SYNC_CALL)
    calls = pd.concat([api[["start_ns", "end_ns", "dur_ns", "op_name", "region"]], staging(api, plain, gpu)], axis=1)
    calls = calls.assign(name=plain)[blocks]
    seen = set(api["correlation_id"].dropna().astype("int64").tolist())
    rows = sync[(sync["sync_type"].astype(object) != "stream_wait_event") & ~sync["correlation_id"].isin(seen)]
    rows = rows[["name", "start_ns", "end_ns", "dur_ns", "op_name"]].assign(region=None, staging=False, copy_call_ns=0)
    out: pd.DataFrame = pd.concat([calls, rows.assign(name=rows["name"].astype(object))], ignore_index=True)
    return out


def staging(api: pd.DataFrame, plain: pd.Series, gpu: pd.DataFrame) -> pd.DataFrame:
    """Per CUDA API call: does the host wait in it for a host-to-device copy from pageable memory?

    True for a stream synchronize whose previous call on the same thread launched an HtoD
    copy from pageable (or unknown) memory: what PyTorch's blocking ``.to(device)`` does
    (the host stages the data through a pinned buffer and waits for it); and for a
    synchronous copy call that launched such a copy itself. ``copy_bytes``: that copy's
    size; ``copy_call_ns``: the time in the launching call before the sync (0 when the call
    is the sync).
    """
    trace = api["trace_id"].astype(object).fillna("").to_numpy()
    thread = pd.factorize(pd.MultiIndex.from_arrays([trace, api["pid"].fillna(-1), api["tid"].fillna(-1)]))[0]
    order = np.lexsort((api["end_ns"].to_numpy(np.int64, na_value=0), api["start_ns"].to_numpy(np.int64), thread))
    prev = np.full(len(api), -1, dtype=np.int64)
    same = thread[order[1:]] == thread[order[:-1]]
    prev[order[1:][same]] = order[:-1][same]
    key = pd.DataFrame({"trace": trace, "event_id": api["event_id"].astype("Int64")})
    joined = key.merge(_staged_launches(gpu), how="left", on=["trace", "event_id"], validate="many_to_one")
    size = joined["bytes"].to_numpy(np.float64, na_value=np.nan)  # NaN: the call launched no such copy
    itself = ~np.isnan(size)
    before = np.maximum(prev, 0)
    after = (prev >= 0) & _matches(plain, STREAM_SYNC) & ~np.isnan(size[before]) & ~itself
    call_ns = api["dur_ns"].to_numpy(np.int64, na_value=0)[before]
    out: pd.DataFrame = pd.DataFrame(
        {
            "staging": after | itself,
            "copy_bytes": np.where(itself, size, np.where(after, size[before], np.nan)),
            "copy_call_ns": np.where(after, call_ns, 0),
        }
    )
    return out


def _staged_launches(gpu: pd.DataFrame) -> pd.DataFrame:
    """Columns ``trace``, ``event_id`` (of the launching call), ``bytes``: HtoD copies from pageable memory."""
    src = gpu["src_kind"].astype(object)
    htod = (gpu["kind"] == "memcpy") & (gpu["copy_kind"].astype(object) == "HtoD")
    copies = gpu[htod & (src.isna() | src.isin(STAGED_FROM))]
    copies = copies[copies["launch_event_id"].notna()]
    trace = copies["trace_id"].astype(object).fillna("")
    g = copies["bytes"].astype("float64").fillna(0).groupby([trace.to_numpy(), copies["launch_event_id"].to_numpy()])
    out: pd.DataFrame = g.sum().rename_axis(["trace", "event_id"]).reset_index().astype({"event_id": "Int64"})
    return out


def syncs(calls: pd.DataFrame, last_launch_ns: int | None) -> Syncs:
    """Count and blocked time of :func:`sync_calls`, by call and by the operator that caused them.

    ``stalls``: the syncs after which the host launched more GPU work, so that the GPU's queue
    had to refill; a final sync before reading results or stopping the profiler is not one.
    The same, for each kind: ``staging`` (the host waits for a copy from pageable memory, with
    the copies' ``bytes`` and the time in the copy calls, ``copy_call_ns``) and
    ``result_waits`` (every other sync: ``.item()``, ``.cpu()``, explicit synchronize ...).
    """
    late = calls["end_ns"] < (last_launch_ns if last_launch_ns is not None else -1)
    stall = late.to_numpy(bool, na_value=False)
    staged = calls["staging"].to_numpy(bool)
    part = calls[staged]
    return Syncs(
        **_tally(calls, stall),
        result_waits=SyncTally(**_tally(calls[~staged], stall[~staged])),
        staging=StagingTally(
            **_tally(part, stall[staged]),
            bytes=int(part["copy_bytes"].fillna(0).sum()),
            copy_call_ns=int(part["copy_call_ns"].sum()),
        ),
    )


def _tally(calls: pd.DataFrame, stall: Any) -> dict[str, Any]:
    """The fields of a :class:`SyncTally` for ``calls``."""
    by_call = calls.groupby("name", sort=False)["dur_ns"].agg(["size", "sum"]).sort_values("sum", ascending=False)
    return {
        "count": len(calls),
        "dur_ns": int(calls["dur_ns"].fillna(0).sum()),
        "stalls": int(np.sum(stall)),
        "calls": [CallTally(str(n), int(r["size"]), int(r["sum"])) for n, r in by_call.iterrows()],
        "ops": _sync_ops(calls),
    }


def memory_peaks(memory: pd.DataFrame) -> dict[str, MemoryPeak]:
    """Peak allocated and reserved bytes per device (``cpu`` for host allocations) from allocator events."""
    if memory.empty:
        return {}
    device = memory["device"].astype("Int64").astype(object).where(memory["device"].notna(), "cpu")
    g = memory.groupby(device.astype(str), sort=True)
    peaks = pd.DataFrame({"allocated": g["total_allocated_bytes"].max(), "reserved": g["total_reserved_bytes"].max()})
    return {str(dev): MemoryPeak(_int(r["allocated"]), _int(r["reserved"])) for dev, r in peaks.iterrows()}


def _sync_ops(rows: pd.DataFrame) -> list[OpTally]:
    return [OpTally(op, region, count, dur) for op, region, count, dur, _ in _by_op(rows, with_bytes=False)]


def _copy_ops(rows: pd.DataFrame) -> list[CopyOpTally]:
    return [CopyOpTally(op, region, count, dur, size) for op, region, count, dur, size in _by_op(rows, with_bytes=True)]


def _by_op(rows: pd.DataFrame, with_bytes: bool) -> list[tuple[str, str | None, int, int, int]]:
    """The operators (and the annotation around them) that issued ``rows``, most time first:
    (operator, annotation, count, time, bytes: 0 unless ``with_bytes``)."""
    keys = pd.DataFrame(
        {"op": rows["op_name"].astype(object).fillna(NO_OP), "region": rows["region"].astype(object).fillna("")}
    )
    agg: dict[str, Any] = {"count": ("dur_ns", "size"), "dur_ns": ("dur_ns", "sum")}
    if with_bytes:
        agg["bytes"] = ("bytes", "sum")
    g = rows.assign(op=keys["op"].to_numpy(), region=keys["region"].to_numpy()).groupby(["op", "region"], sort=False)
    table = g.agg(**agg).sort_values(["dur_ns", "count"], ascending=False).head(_TOP_OPS)
    return [
        (
            str(op),
            region if region and region != op else None,
            int(r["count"]),
            int(r["dur_ns"]),
            int(r["bytes"]) if with_bytes else 0,
        )
        for (op, region), r in table.iterrows()
    ]


def _int(v: Any) -> int:
    return 0 if pd.isna(v) else int(np.int64(v))
