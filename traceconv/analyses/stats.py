"""Everything the summary measures, for one scope: the whole profiled window, or the steps.

A row belongs to a scope by its anchor time: GPU work by the start of the call that
launched it (its own start when the launch is not in the trace), host ranges by their
start. GPU busy time is the union of a device's kernels, copies and memsets, clipped to
the scope's windows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceconv.analyses import intervals as I
from traceconv.analyses import ops as O
from traceconv.analyses import transfers as T
from traceconv.analyses.idle import breakdown, verdict
from traceconv.analyses.prepare import Frames, i64
from traceconv.analyses.results import Bound, Copies, DeviceTime, LaunchFacts, Syncs
from traceconv.analyses.thresholds import Thresholds

Segments = tuple[I.I64, I.I64]


@dataclass(frozen=True)
class Scope:
    name: str  # "window" or "steps"
    start_ns: I.I64
    end_ns: I.I64
    steps: int  # how many steps the scope holds (1 for a window without steps)
    label: str | None = None  # the steps' name, number as "*"

    @property
    def window_ns(self) -> int:
        return I.length(self.start_ns, self.end_ns)

    @property
    def step_ns(self) -> int:
        """The time of one step: the median step (the whole window without steps)."""
        if self.name != "steps":
            return self.window_ns
        return round(float(np.median(self.end_ns - self.start_ns)))


def window_scope(frames: Frames) -> Scope:
    lo, hi = frames.window
    return Scope("window", np.array([lo], np.int64), np.array([hi], np.int64), 1)


def step_scope(frames: Frames) -> Scope | None:
    s = frames.steps
    if s is None:
        return None
    return Scope("steps", s.start_ns, s.end_ns, s.count, s.label)


@dataclass(frozen=True)
class ScopeStats:
    scope: Scope
    gpu: dict[str, DeviceTime]
    bound: Bound
    gpu_time_ns: int  # summed durations of the GPU rows in scope (streams that overlap count twice)
    ops: pd.DataFrame
    nvtx: pd.DataFrame
    kernels: pd.DataFrame
    memcpy: dict[str, Copies]
    sync: Syncs
    launch: LaunchFacts


def measure(frames: Frames, scope: Scope, thresholds: Thresholds) -> ScopeStats:
    windows = I.union(scope.start_ns, scope.end_ns)
    gpu = frames.gpu[I.inside(i64(frames.gpu["anchor_ns"]), *windows)]
    ranges = frames.ranges[I.inside(i64(frames.ranges["start_ns"]), *windows)]
    busy = device_time(frames.gpu, windows)
    # classified on the whole trace (a sync's previous call may lie outside the scope), then cut to it
    every_sync = T.sync_calls(frames.ranges, frames.sync, frames.gpu)
    calls = every_sync[I.inside(i64(every_sync["start_ns"]), *windows)]
    last_launch = frames.gpu["anchor_ns"].max() if len(frames.gpu) else None
    launch = launch_facts(gpu)
    return ScopeStats(
        scope=scope,
        gpu=busy,
        bound=bound(frames, windows, busy, every_sync, _queue_wait(launch, thresholds), thresholds.gpu_bound_pct),
        gpu_time_ns=int(gpu["dur_ns"].fillna(0).sum()),
        ops=O.op_table(ranges),
        nvtx=O.nvtx_table(ranges),
        kernels=O.kernel_table(gpu),
        memcpy=T.copies(gpu),
        sync=T.syncs(calls, None if pd.isna(last_launch) else int(last_launch)),
        launch=launch,
    )


def _queue_wait(f: LaunchFacts, t: Thresholds) -> bool:
    """Kernels wait as long in the queue as the QUEUE_WAIT finding reports: the host runs ahead."""
    return f.queue_median_ns is not None and f.kernels >= t.min_kernels and f.queue_median_ns / 1e3 >= t.QUEUE_WAIT


def device_time(gpu: pd.DataFrame, windows: Segments) -> dict[str, DeviceTime]:
    """Per device: busy (union of GPU activity inside the windows), idle, and the windows' length."""
    window_ns = int((windows[1] - windows[0]).sum())
    out = {}
    known = gpu[gpu["start_ns"].notna() & gpu["end_ns"].notna()]
    for dev, part in known.groupby(known["device"].astype("Int64").astype(object).fillna("unknown"), sort=True):
        busy = I.overlap(I.union(i64(part["start_ns"]), i64(part["end_ns"])), windows)
        out[str(dev)] = DeviceTime(busy_ns=busy, idle_ns=window_ns - busy, window_ns=window_ns)
    return out


def bound(
    frames: Frames,
    windows: Segments,
    busy: dict[str, DeviceTime],
    syncs: pd.DataFrame,
    queue_wait: bool,
    gpu_bound_pct: float,
) -> Bound:
    """The verdict (:mod:`traceconv.analyses.idle`), the GPUs' busy share, and their idle time by
    cause; ``idle_in_api_pct``: the share of the idle time the host spent inside CUDA calls."""
    window = sum(d.window_ns for d in busy.values())
    api = frames.ranges[frames.ranges["kind"] == "cuda_api"]
    idle = breakdown(frames.gpu, api, syncs, windows)
    if not window:
        return Bound(verdict="no GPU activity", gpu_busy_pct=0.0, idle_in_api_pct=None, idle_ns=idle)
    busy_ns = sum(d.busy_ns for d in busy.values())
    pct = busy_ns * 100.0 / window
    in_api = idle.host_sync + idle.host_launch
    return Bound(
        verdict=verdict(pct, idle, queue_wait, gpu_bound_pct),
        gpu_busy_pct=round(pct, 1),
        idle_in_api_pct=idle.pct(in_api) if idle.total > 0 else None,
        idle_ns=idle,
    )


def launch_facts(gpu: pd.DataFrame) -> LaunchFacts:
    """Kernel launch figures: queue median, kernels shorter than their own launch call, occupancy."""
    k = gpu[gpu["kind"] == "kernel"]
    api_ns = k["launch_end_ns"] - k["launch_start_ns"]
    launched = k[api_ns.notna()]
    tiny = launched[launched["dur_ns"] < api_ns[api_ns.notna()]]
    queue = k["queue_ns"].dropna()
    occ = k[k["occupancy_pct"].notna() & ~k["name"].astype(str).str.lower().str.startswith("nccl")]
    weight = occ["dur_ns"].fillna(0).astype("float64")
    return LaunchFacts(
        kernels=len(k),
        launched=len(launched),
        shorter_than_launch=len(tiny),
        tiny_median_ns=_median(tiny["dur_ns"]),
        launch_median_ns=_median(api_ns.dropna()),
        tiny_names={str(n): int(c) for n, c in tiny["name"].astype(str).value_counts().head(3).items()},
        queue_median_ns=_median(queue),
        queued=len(queue),
        occupancy_pct=float((occ["occupancy_pct"] * weight).sum() / weight.sum()) if weight.sum() > 0 else None,
        occupancy_kernels=len(occ),
    )


def _median(s: pd.Series) -> int | None:
    return None if s.empty else round(float(s.astype("float64").median()))
