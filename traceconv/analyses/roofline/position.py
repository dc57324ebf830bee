"""The roofline's arithmetic: which roof a piece of work is held to, and how close it came.

The compute roof is the peak of the engine and type the work ran on (:func:`roof`); the memory roof is
the intensity (FLOP per byte of the least traffic) times the memory bandwidth. The ridge point, where
they meet, is peak / bandwidth: work of lower intensity is memory-bound, of higher compute-bound, and
``pct_of_roof`` is what it achieved over the lower of the two roofs at its intensity.
"""

from __future__ import annotations

from traceconv.analyses.roofline.peaks import Peaks
from traceconv.analyses.roofline.results import Position

NONE = Position(None, None, None, None, None, None)


def roof_dtype(engine: str | None, kernel_dtype: str | None, input_dtype: str | None) -> str | None:
    """The type a piece of work is held to: its kernels' (by name), else its inputs'; fp32 inputs on
    tensor cores are TF32; bf16 inputs make bf16 work of a kernel named ``f16`` (cuDNN's attention
    kernels are named so for both 16-bit types)."""
    dtype = kernel_dtype or input_dtype
    if dtype == "fp16" and input_dtype == "bf16":
        return "bf16"
    if engine == "tensor" and dtype == "fp32":
        return "tf32"
    return dtype


def roof(peaks: Peaks | None, engine: str | None, dtype: str | None) -> float | None:
    """The compute roof (TFLOP/s) of work on ``engine`` in ``dtype``; an unknown engine takes the tensor
    roof of 16- and 8-bit types (what runs them), the CUDA cores' of the others."""
    if peaks is None or dtype is None:
        return None
    if engine == "cuda" or (engine != "tensor" and dtype in ("fp32", "fp64")):
        return peaks.cuda(dtype)
    return peaks.tensor(dtype) or (peaks.cuda(dtype) if dtype in ("fp32", "int8") else None)


def position(flops: int, moved: int, ns: int, compute_roof: float | None, bandwidth_gbps: float | None) -> Position:
    """Achieved TFLOP/s and GB/s over ``ns``, the intensity, and the place against the roofs."""
    if ns <= 0 or flops <= 0:
        return NONE
    tflops = flops / ns / 1e3
    gbps = moved / ns if moved else None
    intensity = flops / moved if moved else None
    if compute_roof is None:
        return Position(_r(tflops), _r(gbps), _r(intensity), None, None, None)
    if intensity is None or not bandwidth_gbps:
        return Position(_r(tflops), _r(gbps), None, compute_roof, None, _r(tflops * 100.0 / compute_roof))
    memory_roof = intensity * bandwidth_gbps / 1e3  # FLOP/B x GB/s = GFLOP/s -> TFLOP/s
    bound = "memory" if memory_roof < compute_roof else "compute"
    attainable = min(memory_roof, compute_roof)
    return Position(_r(tflops), _r(gbps), _r(intensity), _r(compute_roof), bound, _r(tflops * 100.0 / attainable))


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 2)
