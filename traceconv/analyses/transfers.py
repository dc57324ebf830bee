"""Host/device copies, host-blocking synchronisations and allocator peaks (pure: frames in, dicts out)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from traceconv.analyses.prepare import NO_OP

# CUDA/HIP calls that block the calling host thread until the GPU catches up. Asynchronous
# copies are left out (from pageable memory they are partly synchronous, and PyTorch follows
# them with an explicit stream synchronize anyway); cudaStreamWaitEvent blocks a stream, not the host.
SYNC_CALL = re.compile(
    r"^(cuda|hip)(Stream|Device|Event|Ctx|Thread)Synchronize"
    r"|^cu(Stream|Ctx|Event)Synchronize"
    r"|^(cuda|hip|cu)Memcpy(?!.*Async)"
)
_VERSION = re.compile(r"_v\d+$")  # nsys names calls with their ABI version: cudaMemcpy_v3020
HOST_KINDS = ("Pageable", "Pinned")
_TOP_OPS = 5


def is_sync_call(name: str) -> bool:
    return bool(SYNC_CALL.match(_VERSION.sub("", name)))


def copies(gpu: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Per copy direction: count, bytes, time, bandwidth, share of GPU time, host memory kind, issuing ops."""
    memcpy = gpu[gpu["kind"] == "memcpy"]
    gpu_ns = int(gpu["dur_ns"].fillna(0).sum())
    direction = memcpy["copy_kind"].astype(object).fillna("Unknown")
    out: dict[str, dict[str, Any]] = {}
    for kind, part in memcpy.groupby(direction, sort=True):
        dur, size = int(part["dur_ns"].fillna(0).sum()), int(part["bytes"].fillna(0).sum())
        entry: dict[str, Any] = {
            "count": len(part),
            "bytes": size,
            "dur_ns": dur,
            "bandwidth_gbps": round(size / dur, 2) if dur else None,
            "gpu_time_pct": round(dur * 100.0 / gpu_ns, 2) if gpu_ns else 0.0,
        }
        for host in HOST_KINDS:
            on = (part["src_kind"].astype(object) == host) | (part["dst_kind"].astype(object) == host)
            entry[f"{host.lower()}_count"] = int(on.sum())
        entry["ops"] = _by_op(part, size_col="bytes")
        out[str(kind)] = entry
    return out


def sync_calls(ranges: pd.DataFrame, sync: pd.DataFrame) -> pd.DataFrame:
    """Every host-blocking synchronisation: CUDA API calls, and sync activity rows with no call in the trace.

    Columns: ``name``, ``start_ns``, ``end_ns``, ``dur_ns``, ``op_name``, ``region``. An
    activity row whose call is in the trace is that call: counted once, if the call blocks
    (CUPTI also records syncs for ``cudaEventQuery``, which only polls). Rows of type
    ``stream_wait_event`` block a stream, not the host, and are left out.
    """
    api = ranges[ranges["kind"] == "cuda_api"]
    names = api["name"].astype(object).fillna("")
    distinct = {n: is_sync_call(n) for n in pd.unique(names)}
    calls = api[names.map(distinct).astype(bool)]
    seen = set(api["correlation_id"].dropna().astype("int64").tolist())
    rows = sync[(sync["sync_type"].astype(object) != "stream_wait_event") & ~sync["correlation_id"].isin(seen)]
    cols = ["name", "start_ns", "end_ns", "dur_ns", "op_name"]
    both = pd.concat([calls[cols].assign(region=calls["region"]), rows[cols].assign(region=None)], ignore_index=True)
    both["name"] = both["name"].astype(object).map(lambda n: _VERSION.sub("", str(n)), na_action="ignore")
    out: pd.DataFrame = both
    return out


def syncs(calls: pd.DataFrame, last_launch_ns: int | None) -> dict[str, Any]:
    """Count and blocked time of :func:`sync_calls`, by call and by the operator that caused them.

    ``stalls``: the syncs after which the host launched more GPU work, so that the GPU's queue
    had to refill; a final sync before reading results or stopping the profiler is not one.
    """
    stall = calls["end_ns"] < (last_launch_ns if last_launch_ns is not None else -1)
    by_call = calls.groupby("name", sort=False)["dur_ns"].agg(["size", "sum"]).sort_values("sum", ascending=False)
    return {
        "count": len(calls),
        "dur_ns": int(calls["dur_ns"].fillna(0).sum()),
        "stalls": int(stall.sum()),
        "calls": [{"name": str(n), "count": int(r["size"]), "dur_ns": int(r["sum"])} for n, r in by_call.iterrows()],
        "ops": _by_op(calls, size_col=None),
    }


def memory_peaks(memory: pd.DataFrame) -> dict[str, dict[str, int]]:
    """Peak allocated and reserved bytes per device (``cpu`` for host allocations) from allocator events."""
    if memory.empty:
        return {}
    device = memory["device"].astype("Int64").astype(object).where(memory["device"].notna(), "cpu")
    g = memory.groupby(device.astype(str), sort=True)
    peaks = pd.DataFrame({"allocated": g["total_allocated_bytes"].max(), "reserved": g["total_reserved_bytes"].max()})
    return {
        str(dev): {"allocated_peak_bytes": _int(r["allocated"]), "reserved_peak_bytes": _int(r["reserved"])}
        for dev, r in peaks.iterrows()
    }


def _by_op(rows: pd.DataFrame, size_col: str | None) -> list[dict[str, Any]]:
    """The operators (and the annotation around them) that issued ``rows``, most time first."""
    keys = pd.DataFrame(
        {"op": rows["op_name"].astype(object).fillna(NO_OP), "region": rows["region"].astype(object).fillna("")}
    )
    agg: dict[str, Any] = {"count": ("dur_ns", "size"), "dur_ns": ("dur_ns", "sum")}
    if size_col:
        agg["bytes"] = (size_col, "sum")
    g = rows.assign(op=keys["op"].to_numpy(), region=keys["region"].to_numpy()).groupby(["op", "region"], sort=False)
    table = g.agg(**agg).sort_values(["dur_ns", "count"], ascending=False).head(_TOP_OPS)
    out = []
    for (op, region), r in table.iterrows():
        item: dict[str, Any] = {
            "name": op,
            "region": region if region and region != op else None,
            "count": int(r["count"]),
            "dur_ns": int(r["dur_ns"]),
        }
        if size_col:
            item["bytes"] = int(r["bytes"])
        out.append(item)
    return out


def _int(v: Any) -> int:
    return 0 if pd.isna(v) else int(np.int64(v))
