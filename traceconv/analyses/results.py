"""The typed results of the analyses: what ``summary``, ``diff`` and the findings measure.

Each figure is declared once here; the analyses fill these, the findings and the renderers
read their attributes, and :func:`plain` turns any of them into the JSON form (times in
nanoseconds, sizes in bytes), field for field.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any


@dataclasses.dataclass(frozen=True)
class DeviceTime:
    """One device in one scope: busy (the union of its kernels, copies and memsets), idle, and the scope's length."""

    busy_ns: int
    idle_ns: int
    window_ns: int


@dataclasses.dataclass(frozen=True)
class IdleBreakdown:
    """The GPUs' idle time by what happened meanwhile, instant by instant (the cascade of
    :mod:`traceconv.analyses.summary.timeline.busy`), summed over devices."""

    queued: int  # ns: launched work waited to start (a GPU-side wait)
    host_sync: int  # ns: the host was blocked in a sync or a synchronous copy
    host_launch: int  # ns: the host was inside another CUDA call
    host_other: int  # ns: the host was elsewhere

    @property
    def total(self) -> int:
        return self.queued + self.host_sync + self.host_launch + self.host_other

    def pct(self, part: int) -> float:
        return round(part * 100.0 / self.total, 1) if self.total else 0.0


@dataclasses.dataclass(frozen=True)
class Bound:
    """The verdict, the GPUs' busy share, the share of their idle time the host spent in CUDA calls,
    and the idle time by cause."""

    verdict: str
    gpu_busy_pct: float
    idle_in_api_pct: float | None
    idle_ns: IdleBreakdown


def op_label(name: str, region: str | None) -> str:
    """An operator with the annotation around it: ``aten::copy_ in data_to_gpu``."""
    return name + (f" in {region}" if region else "")


@dataclasses.dataclass(frozen=True)
class OpTally:
    """An operator (and the annotation around it, ``region``) that issued copies or syncs."""

    name: str
    region: str | None
    count: int
    dur_ns: int

    @property
    def label(self) -> str:
        return op_label(self.name, self.region)


@dataclasses.dataclass(frozen=True)
class CopyOpTally(OpTally):
    bytes: int


@dataclasses.dataclass(frozen=True)
class CallTally:
    """A CUDA call that blocked the host: how often and for how long."""

    name: str
    count: int
    dur_ns: int


@dataclasses.dataclass(frozen=True)
class SyncTally:
    """Host-blocking synchronisations: count, blocked time, those followed by more GPU work (``stalls``)."""

    count: int
    dur_ns: int
    stalls: int
    calls: list[CallTally]
    ops: list[OpTally]


@dataclasses.dataclass(frozen=True)
class StagingTally(SyncTally):
    """Syncs in which the host waits for an HtoD copy from pageable memory; the copies' bytes and
    the time in the copy calls."""

    bytes: int
    copy_call_ns: int


@dataclasses.dataclass(frozen=True)
class Syncs(SyncTally):
    """Every host-blocking sync, and the same by kind."""

    result_waits: SyncTally
    staging: StagingTally


@dataclasses.dataclass(frozen=True)
class Copies:
    """The copies of one direction (HtoD, DtoH, ...)."""

    count: int
    bytes: int
    dur_ns: int
    bandwidth_gbps: float | None
    gpu_time_pct: float
    pageable_count: int
    pinned_count: int
    ops: list[CopyOpTally]


# -- where the memory went (traceconv.analyses.memory) -----------------------------------------
@dataclasses.dataclass(frozen=True)
class MemoryHolder:
    """Allocations live at a device's peak, by the operator (or CUDA call) that made them."""

    name: str
    bytes: int
    count: int


@dataclasses.dataclass(frozen=True)
class MemoryPoint:
    """One bucket of a device's memory over time: the highest allocated and reserved in it."""

    start_ns: int
    allocated_bytes: int
    reserved_bytes: int | None  # null where the input has no reserved figure (Nsight Systems)


@dataclasses.dataclass(frozen=True)
class MemoryPeak:
    """A device's memory: its peaks, what held the allocated peak, its course over the steps and the trace."""

    allocated_peak_bytes: int
    reserved_peak_bytes: int | None  # the highest reserved anywhere (None when not recorded)
    peak_ns: int | None = None  # when allocated memory peaked (the first time)
    peak_offset_ns: int | None = None  # the same, from the start of the profiled window
    reserved_at_peak_bytes: int | None = None
    live_bytes: int = 0  # of the peak: allocations the trace saw, still live
    before_trace_bytes: int = 0  # of the peak: allocated before the trace began (no operator to name)
    holders: list[MemoryHolder] = dataclasses.field(default_factory=list)
    step_end_bytes: list[int] = dataclasses.field(default_factory=list)  # allocated at the end of each step
    series: list[MemoryPoint] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class LaunchFacts:
    """Kernel launch figures: queue time, kernels shorter than their own launch call, occupancy."""

    kernels: int
    launched: int
    shorter_than_launch: int
    tiny_median_ns: int | None
    launch_median_ns: int | None
    tiny_names: dict[str, int]
    queue_median_ns: int | None
    queued: int
    occupancy_pct: float | None
    occupancy_kernels: int
    occupancy_limiters: dict[str, int] = dataclasses.field(default_factory=dict)  # limiter -> execution ns


@dataclasses.dataclass(frozen=True)
class CriticalPath:
    """A step's time by what it waited for (``parts``, ns, in :data:`PATH_PARTS` order; they sum to
    ``step_ns``): the median step's; ``median_ns``: each part's median over the steps; ``longest``: the
    GPU work that took most of a step (name, ns a step)."""

    step_ns: int
    parts: dict[str, int]
    median_ns: dict[str, int] = dataclasses.field(default_factory=dict)
    longest: list[dict[str, Any]] = dataclasses.field(default_factory=list)


# The parts of a step's critical path: the GPU running work (by class), or the GPU idle and the step
# waiting for what kept it so (the idle gap's cause).
PATH_PARTS = (
    "gpu_compute",
    "gpu_copies",
    "gpu_communication",
    "sync_wait",
    "launch",
    "host_ops",
    "host_other",
    "gpu_wait",
)


@dataclasses.dataclass(frozen=True)
class Lack:
    """Something a profile does not hold: what it is, what it leaves unanswered, and how to record it."""

    missing: str
    hides: str
    how: str


@dataclasses.dataclass(frozen=True)
class HostActivity:
    """What the host was in during the GPUs' long idle gaps: a range (operator, annotation, CUDA call)
    and the gap time it overlapped."""

    name: str
    kind: str  # cpu_op, nvtx or cuda_api
    overlap_ns: int


@dataclasses.dataclass(frozen=True)
class IdleGaps:
    """The GPUs' idle gaps in a scope, each charged whole to what happened when the GPU ran out of
    work (:mod:`traceconv.analyses.summary.timeline.gaps`), in ns summed over devices: what removing each cause
    would win at most."""

    queued_ns: int  # launched work waited on a dependency of the GPU's own
    result_wait_ns: int  # the host was blocked waiting for a GPU result
    staging_ns: int  # the host was blocked staging a copy from pageable memory
    launch_ns: int  # short gaps: the host issued work more slowly than the GPU ran it
    host_ns: int  # long gaps: the host's own work (data pipeline, Python, CPU operators, CUDA calls)
    host_api_ns: int  # of host_ns: gaps that began with the host inside a CUDA call (loading, allocating ...)
    host_outside_ops_ns: int  # of host_ns: outside every operator and annotation (steps aside)
    result_wait_ops: list[OpTally]  # the operators whose syncs the result-wait gaps followed
    staging_ops: list[OpTally]
    host_activity: list[HostActivity]  # the ranges the host was in during the long gaps, most time first

    @property
    def total_ns(self) -> int:
        return self.queued_ns + self.result_wait_ns + self.staging_ns + self.launch_ns + self.host_ns


def plain(value: Any) -> Any:
    """The JSON form of a result (dataclasses as objects, in field order), recursively."""
    if type(value) in _LEAVES:  # most values (thousands of per-step rows' numbers): as they are
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {name: plain(getattr(value, name)) for name in _field_names(type(value))}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


_LEAVES = frozenset({str, int, float, bool, type(None)})


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


# -- the summary's report ----------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class OpRow:
    """An operator or annotation name: calls, GPU time it launched (self, total), CPU time (total, self)."""

    name: str
    calls: int
    gpu_self_ns: int
    gpu_total_ns: int
    cpu_total_ns: int
    cpu_self_ns: int
    input_dims: str | None  # the most frequent ``Input Dims`` (record_shapes)
    shapes: int  # how many different input dims were seen


@dataclasses.dataclass(frozen=True)
class RangeRow:
    """An annotation or NVTX range name: count, time, and GPU time of the work launched inside it,
    on its own thread (NVIDIA's NVTX projection) and by any thread of its process."""

    name: str
    count: int
    dur_ns: int
    gpu_ns: int
    gpu_process_ns: int


@dataclasses.dataclass(frozen=True)
class KernelRow:
    name: str
    count: int
    dur_ns: int
    avg_ns: int
    queue_ns: int
    queue_avg_ns: int | None
    time_pct: float
    occupancy_pct: float | None
    short_name: str | None


@dataclasses.dataclass(frozen=True)
class ScopedBound(Bound):
    scope: str  # what it was measured on: "steps" or "window"


@dataclasses.dataclass(frozen=True)
class StepFigures:
    """The steps: how many, their length, and what the GPU and the host did in them."""

    count: int
    label: str | None
    median_ns: int  # the step time: the median step as the program lived it (host range and GPU work)
    cpu_median_ns: int  # the host ranges' median
    host_ahead_ns: int | None  # median of each step's GPU end less its host end (negative: the GPU waited)
    avg_ns: int
    min_ns: int
    max_ns: int
    window_ns: int
    gpu: dict[str, DeviceTime]
    memcpy: dict[str, Copies]
    sync: Syncs


SYNC_KINDS = {"result_waits": "result waits", "staging": "pageable staging"}  # the kinds of sync, as shown
