"""The roofline's typed results: per operator, per kernel name, per step, and the whole (``summary``'s
``roofline``). Rates are TFLOP/s (10^12) and GB/s (10^9), intensity FLOP per byte, times ns."""

from __future__ import annotations

import dataclasses

from traceconv.analyses.roofline.device import Device


@dataclasses.dataclass(frozen=True)
class Position:
    """Where a piece of work stands against the two roofs: what it achieved over its GPU time, its
    arithmetic intensity, the roof that binds it at that intensity and how close it came."""

    tflops: float | None  # achieved: its FLOPs over its GPU time
    gbps: float | None  # achieved: the least bytes it must move over its GPU time
    intensity: float | None  # FLOP per byte
    roof_tflops: float | None  # the compute roof of the engine and type it ran on
    bound: str | None  # "compute" (intensity past the ridge point) or "memory"
    pct_of_roof: float | None  # achieved over the roof that binds it: min(compute roof, intensity x bandwidth)


@dataclasses.dataclass(frozen=True)
class OpRoof:
    """An operator name's matrix work: its calls, FLOPs, least traffic and GPU time (the kernels it
    launched itself), the engine its matrix kernels ran on, and its place on the roofline."""

    name: str
    calls: int
    flops: int
    bytes: int
    gpu_ns: int
    engine: str | None  # tensor, cuda, mixed; None: unknown
    dtype: str | None  # the type the roof is taken for
    tflops: float | None
    gbps: float | None
    intensity: float | None
    roof_tflops: float | None
    bound: str | None
    pct_of_roof: float | None


@dataclasses.dataclass(frozen=True)
class KernelRoof:
    """A kernel name: its engine (:mod:`.tensor_cores`), its time, the FLOPs of its operators' work that
    fell to it, and what that achieved."""

    name: str
    count: int
    dur_ns: int
    rule: str
    engine: str | None
    dtype: str | None
    flops: int | None  # None: none of its operators' FLOPs are known
    known_ns: int  # of dur_ns: the calls whose operators' FLOPs are known (what tflops is over)
    tflops: float | None
    bound: str | None
    pct_of_roof: float | None
    tensor_active_pct: float | None = None  # GPU metrics: Tensor Active inside its executions


@dataclasses.dataclass(frozen=True)
class StepRoof:
    """One step: its FLOPs (per GPU), its time as the program lived it, the FLOP/s and MFU that makes."""

    step: int  # 0-based, in time order
    dur_ns: int
    flops: int
    tflops: float
    mfu_pct: float | None


@dataclasses.dataclass(frozen=True)
class MatrixTime:
    """Kernel time in the scope (summed over GPUs), by what ran it: matrix work on tensor cores, on CUDA
    cores (per type), of unknown engine; and every other kernel."""

    tensor_ns: int
    cuda_ns: int
    unknown_ns: int
    other_ns: int
    cuda_by_dtype: dict[str, int]  # the CUDA-core time per type (fp32, bf16 ...)
    cuda_memory_bound_ns: int  # of cuda_ns: kernels whose known work is memory-bound at the CUDA cores' roof
    cuda_kernels: list[str]  # the CUDA-core matrix kernels, most time first (a few)
    flops_known_pct: float  # of the matrix kernels' time: the share whose operators' FLOPs are known

    @property
    def matrix_ns(self) -> int:
        return self.tensor_ns + self.cuda_ns + self.unknown_ns


@dataclasses.dataclass(frozen=True)
class Roofline:
    """``summary``'s ``roofline``: the GPU and its peaks, the FLOPs of a step and what they achieved over
    the step time, MFU, the matrix time by engine, and the operators and kernels on the roofline."""

    device: Device
    scope: str  # "steps" or "window"
    steps: int
    gpus: int  # GPUs that ran kernels in the scope: FLOPs are per GPU
    step_ns: int  # the step time: the median step as the program lived it (the GPUs' span without steps)
    flops_per_step: int | None  # per GPU; None: no FLOPs known
    bytes_per_step: int | None
    achieved_tflops: float | None  # flops_per_step over step_ns
    mfu_pct: float | None  # achieved_tflops over mfu_peak_tflops
    mfu_basis: str | None  # the peak MFU is measured against ("bf16 dense tensor")
    mfu_peak_tflops: float | None
    matrix: MatrixTime
    ops: list[OpRoof]
    kernels: list[KernelRoof]
    per_step: list[StepRoof]  # empty without steps or without known FLOPs
    notes: list[str]
