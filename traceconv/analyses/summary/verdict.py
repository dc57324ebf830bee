"""Why the GPUs sit idle, and the verdict that follows from it.

Each device's idle time in a scope (the scope's windows outside the union of its kernels, copies
and memsets; :mod:`traceconv.analyses.summary.timeline.busy` measures it) is split by what was happening meanwhile,
in this order of precedence:

- ``queued``: work for the device had been launched (its launch call had returned) and had not
  started: the GPU waited on something of its own (a stream or event dependency, another GPU);
- ``host_sync``: the host was blocked in a synchronisation or a synchronous copy
  (:func:`traceconv.analyses.transfers.sync_calls`);
- ``host_launch``: the host was inside another CUDA call (launching: launch overhead);
- ``host_other``: the host was doing anything else (Python, data loading, the CPU side of ops).

The verdict comes from the idle *gaps* charged to their origin (:mod:`traceconv.analyses.summary.timeline.gaps`):
``gpu-bound`` when the GPUs are busy ``gpu_bound_pct`` of the time or more; else the cause whose
gaps cost most names it: ``sync-bound`` (the host blocked in syncs), ``launch-bound`` (short gaps
between launches), ``cpu-bound`` (the host's own work), ``gpu-wait`` (launched work waiting on a
dependency of the GPU's own). A long queue (the host ahead of the GPU) is not a verdict of its
own: it is what a GPU-bound program looks like.
"""

from __future__ import annotations

from traceconv.analyses.results import IdleGaps


def verdict(busy_pct: float, gaps: IdleGaps, gpu_bound_pct: float) -> str:
    if busy_pct >= gpu_bound_pct:
        return "gpu-bound"
    shares = {
        "cpu-bound": gaps.host_ns,
        "sync-bound": gaps.result_wait_ns + gaps.staging_ns,
        "launch-bound": gaps.launch_ns,
        "gpu-wait": gaps.queued_ns,
    }
    largest = max(shares, key=lambda name: shares[name])
    return largest if shares[largest] > 0 else "cpu-bound"
