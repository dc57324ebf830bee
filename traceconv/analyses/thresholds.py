"""When each finding is reported: one threshold per finding code, and the verdict's."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from traceconv.errors import UsageError


@dataclass(frozen=True)
class Thresholds:
    """When each finding is reported (``--threshold NAME=VALUE`` on the command line)."""

    HOST_DEVICE_COPIES: float = 5.0  # % of GPU time spent in HtoD + DtoH copies
    SYNC_STALLS: float = 1.0  # syncs per step that wait for a GPU result (no steps: those followed by more GPU work)
    PAGEABLE_COPIES: float = 1.0  # HtoD copies per step from pageable memory that the host waits for (no steps: all)
    GPU_IDLE: float = 10.0  # % of a step the GPUs wait for the host (its own work; launches unless TINY_KERNELS)
    QUEUE_WAIT: float = 1000.0  # median µs a kernel waits between its launch call and its start
    LOW_OCCUPANCY: float = 15.0  # time-weighted estimated achieved occupancy %, reported *below* this
    TINY_KERNELS: float = 50.0  # % of launched kernels that run shorter than their own launch call
    STRAGGLER: float = 10.0  # % a rank's compute time (per step when marked) is over the ranks' median
    LOW_OVERLAP: float = 30.0  # % of communication time that runs beside compute, reported *below* this
    COMM_BOUND: float = 20.0  # % of a rank's steps (window without steps) in communication with no compute
    NO_TENSOR_CORES: float = 5.0  # % of GPU time in matrix kernels (GEMM, convolution, attention) on CUDA cores
    LOW_MFU: float = 20.0  # MFU % (FLOPs a step over the step time, against the dense bf16 peak), reported *below* ...
    mfu_known_pct: float = 50.0  # ... when the FLOPs of at least this % of the matrix kernels' time are known
    mfu_roof_pct: float = 50.0  # LOW_MFU's saving: tensor-core kernels' time beyond this % of their roofs
    RECOMPILES: float = 20.0  # % of the steps in which Dynamo compiles (2 steps at least)
    LOW_SM_ACTIVITY: float = 50.0  # SMs Active % (GPU metrics) while the GPU runs work, reported *below* this ...
    sm_busy_pct: float = 5.0  # ... when the GPUs are busy with kernels, copies or memsets this % of the time or more
    gpu_bound_pct: float = 80.0  # GPU busy share at which the verdict is "gpu-bound"
    min_kernels: float = 10.0  # kernels needed before QUEUE_WAIT, LOW_OCCUPANCY and TINY_KERNELS are judged
    min_cost_ms: float = 1.0  # copy/sync findings: their cost (ms) in the whole scope must reach this ...
    min_cost_pct: float = 1.0  # ... and this share of a step (of the window without steps)
    launch_gap_us: float = 200.0  # a GPU idle gap the host leaves shorter than this is launch overhead
    # -- memory (traceconv.analyses.memory) --
    MEMORY_GROWTH: float = 1.0  # MB a step by which allocated memory at the end of each step grows (at every step)
    FRAGMENTATION: float = 50.0  # % of the reserved memory not allocated at the allocated peak ...
    min_fragmentation_mb: float = 1024.0  # ... when that unallocated part is at least this many MB

    def with_overrides(self, overrides: Mapping[str, float]) -> Thresholds:
        """A copy with ``overrides`` applied; names match fields case-insensitively."""
        fields = {f.name.lower(): f.name for f in dataclasses.fields(self)}
        changes = {}
        for name, value in overrides.items():
            field = fields.get(name.lower())
            if field is None:
                raise UsageError(None, f"unknown threshold {name!r}", f"choose from {', '.join(fields.values())}")
            changes[field] = float(value)
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)

    @classmethod
    def from_options(cls, items: Sequence[str]) -> Thresholds:
        """The defaults with ``NAME=VALUE`` overrides (``--threshold``) applied."""
        overrides = {}
        for item in items:
            name, sep, value = item.partition("=")
            try:
                overrides[name.strip()] = float(value)
            except ValueError:
                sep = ""
            if not sep:
                raise UsageError(
                    None, f"--threshold {item!r} is not NAME=NUMBER", "e.g. --threshold HOST_DEVICE_COPIES=5"
                )
        return cls().with_overrides(overrides)


DEFAULTS = Thresholds()
