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
from traceconv.analyses.prepare import Frames, i64
from traceconv.analyses.results import Bound, Copies, DeviceTime, LaunchFacts, Syncs

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


def measure(frames: Frames, scope: Scope, gpu_bound_pct: float) -> ScopeStats:
    windows = I.union(scope.start_ns, scope.end_ns)
    gpu = frames.gpu[I.inside(i64(frames.gpu["anchor_ns"]), *windows)]
    ranges = frames.ranges[I.inside(i64(frames.ranges["start_ns"]), *windows)]
    busy = device_time(frames.gpu, windows)
    # classified on the whole trace (a sync's previous call may lie outside the scope), then cut to it
    calls = T.sync_calls(frames.ranges, frames.sync, frames.gpu)
    calls = calls[I.inside(i64(calls["start_ns"]), *windows)]
    last_launch = frames.gpu["anchor_ns"].max() if len(frames.gpu) else None
    return ScopeStats(
        scope=scope,
        gpu=busy,
        bound=bound(frames, windows, busy, gpu_bound_pct),
        gpu_time_ns=int(gpu["dur_ns"].fillna(0).sum()),
        ops=O.op_table(ranges),
        nvtx=O.nvtx_table(ranges),
        kernels=O.kernel_table(gpu),
        memcpy=T.copies(gpu),
        sync=T.syncs(calls, None if pd.isna(last_launch) else int(last_launch)),
        launch=launch_facts(gpu),
    )


def device_time(gpu: pd.DataFrame, windows: Segments) -> dict[str, DeviceTime]:
    """Per device: busy (union of GPU activity inside the windows), idle, and the windows' length."""
    window_ns = int((windows[1] - windows[0]).sum())
    out = {}
    known = gpu[gpu["start_ns"].notna() & gpu["end_ns"].notna()]
    for dev, part in known.groupby(known["device"].astype("Int64").astype(object).fillna("unknown"), sort=True):
        busy = I.overlap(I.union(i64(part["start_ns"]), i64(part["end_ns"])), windows)
        out[str(dev)] = DeviceTime(busy_ns=busy, idle_ns=window_ns - busy, window_ns=window_ns)
    return out


def bound(frames: Frames, windows: Segments, busy: dict[str, DeviceTime], gpu_bound_pct: float) -> Bound:
    """CPU- or GPU-bound: the GPUs' busy share, and how much of their idle time the host spent in CUDA calls.

    GPU-bound when the GPUs are busy ``gpu_bound_pct`` of the time or more; otherwise the
    host does not feed them fast enough (CPU-bound). ``idle_in_api_pct`` tells launch
    overhead (host inside CUDA calls while the GPU waits) from other host work.
    """
    window = sum(d.window_ns for d in busy.values())
    if not window:
        return Bound(verdict="no GPU activity", gpu_busy_pct=0.0, idle_in_api_pct=None)
    busy_ns = sum(d.busy_ns for d in busy.values())
    api = frames.ranges[frames.ranges["kind"] == "cuda_api"]
    api_segs = I.union(i64(api["start_ns"]), i64(api["end_ns"]))
    idle_api = 0
    for _, part in frames.gpu.groupby(frames.gpu["device"].astype("Int64").astype(object).fillna("unknown")):
        dev_segs = I.union(i64(part["start_ns"]), i64(part["end_ns"]))
        idle_api += I.overlap(windows, api_segs) - I.overlap3(windows, api_segs, dev_segs)
    idle = window - busy_ns
    pct = busy_ns * 100.0 / window
    return Bound(
        verdict="gpu-bound" if pct >= gpu_bound_pct else "cpu-bound",
        gpu_busy_pct=round(pct, 1),
        idle_in_api_pct=round(idle_api * 100.0 / idle, 1) if idle > 0 else None,
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
