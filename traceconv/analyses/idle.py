"""Why the GPUs sit idle, and the verdict that follows from it.

Each device's idle time in a scope (the scope's windows outside the union of its kernels, copies
and memsets; :mod:`traceconv.analyses.busy` measures it) is split by what was happening meanwhile,
in this order of precedence:

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

from traceconv.analyses.results import IdleBreakdown

VERDICTS = {
    "host_other": "cpu-bound",
    "host_launch": "launch-bound",
    "host_sync": "sync-bound",
    "queued": "gpu-wait",
}


def verdict(busy_pct: float, idle: IdleBreakdown, queue_wait: bool, gpu_bound_pct: float) -> str:
    if busy_pct >= gpu_bound_pct:
        return "gpu-bound"
    if queue_wait:
        return "mixed"
    shares = {name: getattr(idle, name) for name in VERDICTS}
    largest = max(shares, key=lambda name: (shares[name], name == "host_other"))
    return VERDICTS[largest] if shares[largest] > 0 else "cpu-bound"
