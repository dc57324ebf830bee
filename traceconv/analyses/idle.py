"""Why the GPUs sit idle, and the verdict that follows from it.

Each device's idle time in a scope (the scope's windows outside the union of its kernels,
copies and memsets) is split by what was happening meanwhile, in this order of precedence:

- ``queued``: work for the device had been launched (its launch call had returned) and had not
  started: the GPU waited on something of its own (a stream or event dependency, another GPU);
- ``host_sync``: the host was blocked in a synchronisation or a synchronous copy
  (:func:`traceconv.analyses.transfers.sync_calls`);
- ``host_launch``: the host was inside another CUDA call (launching: launch overhead);
- ``host_other``: the host was doing anything else (Python, data loading, the CPU side of ops).

The verdict: ``gpu-bound`` when the GPUs are busy ``gpu_bound_pct`` of the time or more;
``mixed`` when they are not but kernels wait long in the queue (``QUEUE_WAIT``: the GPU is the
bottleneck while it has work, and idle in other phases); else the largest share of the idle
time names it: ``cpu-bound`` (host elsewhere), ``launch-bound``, ``sync-bound``, ``gpu-wait``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceconv.analyses import intervals as I
from traceconv.analyses.prepare import i64
from traceconv.analyses.results import IdleBreakdown

Segments = tuple[I.I64, I.I64]
VERDICTS = {
    "host_other": "cpu-bound",
    "host_launch": "launch-bound",
    "host_sync": "sync-bound",
    "queued": "gpu-wait",
}


def breakdown(gpu: pd.DataFrame, api: pd.DataFrame, syncs: pd.DataFrame, windows: Segments) -> IdleBreakdown:
    """The idle time of every device in ``windows``, summed over the devices, split by cause."""
    timed = gpu[gpu["start_ns"].notna() & gpu["end_ns"].notna()]
    host_sync = _segments(syncs, "start_ns", "end_ns")
    host_api = _segments(api, "start_ns", "end_ns")
    parts = dict.fromkeys(("queued", "host_sync", "host_launch", "host_other"), 0)
    for _, dev in timed.groupby(timed["device"].astype("Int64").astype(object).fillna("unknown"), sort=True):
        idle = I.subtract(windows, I.union(i64(dev["start_ns"]), i64(dev["end_ns"])))
        waiting = dev[dev["launch_end_ns"].notna() & (dev["launch_end_ns"] < dev["start_ns"])]
        for name, cause in (
            ("queued", _segments(waiting, "launch_end_ns", "start_ns")),
            ("host_sync", host_sync),
            ("host_launch", host_api),
        ):
            parts[name] += I.total(I.intersect(idle, cause))
            idle = I.subtract(idle, cause)
        parts["host_other"] += I.total(idle)
    return IdleBreakdown(**parts)


def verdict(busy_pct: float, idle: IdleBreakdown, queue_wait: bool, gpu_bound_pct: float) -> str:
    if busy_pct >= gpu_bound_pct:
        return "gpu-bound"
    if queue_wait:
        return "mixed"
    shares = {name: getattr(idle, name) for name in VERDICTS}
    largest = max(shares, key=lambda name: (shares[name], name == "host_other"))
    return VERDICTS[largest] if shares[largest] > 0 else "cpu-bound"


def _segments(rows: pd.DataFrame, start: str, end: str) -> Segments:
    known = rows[rows[start].notna() & rows[end].notna()]
    if known.empty:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return I.union(i64(known[start]), i64(known[end]))
