"""The results of ``traceconv ops``: torch's ``key_averages()`` table, or traceconv's own view."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class OpStats:
    """One row of ``traceconv ops``: an event name on a device, summed over its calls.

    ``kind``: op, annotation, runtime (a CUDA API call), overhead (the profiler's own work),
    gpu (kernels, copies, memsets), memory (allocator events outside every CPU event).
    Times in nanoseconds, memory in bytes (allocations minus frees).
    """

    name: str
    device: str  # "cpu" or "cuda"
    kind: str
    calls: int
    self_cpu_ns: int
    cpu_total_ns: int
    self_gpu_ns: int
    gpu_total_ns: int
    cpu_mem_bytes: int
    self_cpu_mem_bytes: int
    gpu_mem_bytes: int
    self_gpu_mem_bytes: int
    input_shapes: str | None = None  # grouped by input shape: as torch prints them
    stack: list[str] | None = None  # grouped by stack: the first frames
    flops: int | None = None  # sessions with with_flops=True: torch's estimate
    tflops: float | None = None  # traceconv's view: its matrix work's FLOPs over its self GPU time (roofline)
    pct_of_roof: float | None = None  # ... that over the roof that binds it on the trace's GPU


@dataclasses.dataclass(frozen=True)
class OpsDifference:
    """How one column of traceconv's own view differs from torch's, summed over the rows both have."""

    column: str
    ours: int
    torch: int
    reason: str
    explained: int = 0  # the part of ours - torch that the reason accounts for


@dataclasses.dataclass(frozen=True)
class OpsTable:
    """``traceconv ops``: torch's ``key_averages()`` (``view`` "torch") or traceconv's own view."""

    source: str
    view: str
    group_by: list[str]
    rows: list[OpStats]
    self_cpu_total_ns: int  # torch's "Self CPU time total"
    self_gpu_total_ns: int  # torch's "Self CUDA time total": GPU rows, annotations aside
    memory: bool  # profile_memory: torch's table has memory columns
    with_flops: bool = False  # with_flops: torch's table has a FLOPs column
    runtime: list[OpStats] = dataclasses.field(default_factory=list)  # own view: CUDA API calls
    differences: list[OpsDifference] = dataclasses.field(default_factory=list)  # own view vs torch
    notes: list[str] = dataclasses.field(default_factory=list)
    # per row, torch's float microseconds (self CPU, CPU total, self CUDA, CUDA total) summed as
    # torch sums them: the last digit of its table depends on them
    torch_us: list[tuple[float, ...]] = dataclasses.field(default_factory=list)
