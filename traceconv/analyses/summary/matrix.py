"""Findings about the matrix work, from :mod:`traceconv.analyses.roofline`: ``NO_TENSOR_CORES`` and
``LOW_MFU``, time findings like the others (a saving per step, ranked by it).

``NO_TENSOR_CORES``: matrix kernels (GEMMs, convolutions, attention) on the CUDA cores. The saving is
their measured time less what the tensor cores would take for the same work, in the type the fix runs
it in (TF32 where the GPU's TF32 is at least twice its fp32, else bf16 or fp16: :meth:`Peaks.tensor_fix`).
The tensor cores are taken to reach :data:`TENSOR_SHARE` (3/4) of the share of their peak that the CUDA
cores reached of theirs, less than measured: on the H200 profiles of ``fixtures/planted`` (the MLP of
six Linear(4096, 4096) and the transformer, fp32 and TF32 runs of the same program), the fp32 GEMMs ran
at 76-78% of fp32's peak on the CUDA cores and the same GEMMs in TF32 at 59-84% of TF32's (66% by
time), 0.85 of that share. So the time kept is the CUDA-core time x (CUDA-core peak / tensor peak) /
:data:`TENSOR_SHARE` (on an H100 or H200 in TF32: 18%, a saving of 82% of that time; the peaks alone
would say 86%, the TF32 runs took 14-15%). The fp32 MLP's NO_TENSOR_CORES says 79% of its step, the
transformer's 66%: the TF32 runs' steps were 82% and 67% shorter. Never counted under twice as fast
where the peaks give that much (RTX 4090, A10: 2x); kernels whose known work is memory-bound at the
CUDA cores' roof win nothing; a GPU whose peaks are not known takes the tensor cores as twice as fast
(:data:`UNKNOWN_GAIN`); never more than the time itself.

``LOW_MFU``: MFU below its threshold, judged when the FLOPs of ``mfu_known_pct`` % of the matrix time
are known. The other findings already carry the idle GPU and the CUDA cores, so its saving is only
what the tensor-core kernels lose to their own roofs: per kernel name whose work is known, the time
beyond what it would take at ``mfu_roof_pct`` (50) % of the roof that binds it (the lower of the
compute roof and intensity x bandwidth); cuBLAS' large bf16 GEMMs reach 55-60% of the dense peak on
the H200 profiles of ``fixtures/planted``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from traceconv.analyses.finding import Finding
from traceconv.analyses.prepare import Program
from traceconv.analyses.roofline import Roofline
from traceconv.analyses.roofline.results import KernelRoof, MatrixTime
from traceconv.analyses.summary.advice import fix
from traceconv.analyses.summary.measure import ScopeStats
from traceconv.analyses.summary.timed import costly, per_of, timed, where, wins
from traceconv.analyses.thresholds import Thresholds
from traceconv.names import fit, kernel_label
from traceconv.units import ms

UNKNOWN_GAIN = 0.5  # a GPU whose peaks are not known: the tensor cores taken as twice as fast, no more
TENSOR_SHARE = 0.75  # the share of the CUDA cores' fraction of their peak that the tensor cores are given


def no_tensor_cores(stats: ScopeStats, roof: Roofline, t: Thresholds, program: Program) -> Finding | None:
    """Matrix kernels on the CUDA cores; the saving: their time less what the tensor cores would take
    (see the module: conservative, and none of it for work that is memory-bound already)."""
    m = roof.matrix
    if not m.cuda_ns or not stats.gpu_time_ns:
        return None
    value = m.cuda_ns * 100.0 / stats.gpu_time_ns
    if value < t.NO_TENSOR_CORES or not costly(stats, m.cuda_ns, t):
        return None
    per = per_of(stats)
    peaks = roof.device.peaks
    fixes = {d: peaks.tensor_fix(d) if peaks else None for d in m.cuda_by_dtype}
    kept = sum(ns * kept_share(fixes[d]) for d, ns in m.cuda_by_dtype.items())
    faster = (m.cuda_ns - m.cuda_memory_bound_ns) / m.cuda_ns  # the part the tensor cores can speed up
    saving = per.per_step(max(m.cuda_ns - min(kept, m.cuda_ns), 0) * faster)  # never more than their time
    dtypes = sorted(m.cuda_by_dtype, key=lambda d: -m.cuda_by_dtype[d])
    names = ", ".join(fit([kernel_label(n) for n in m.cuda_kernels[:2]], 36))
    advice = fix(_advice(dtypes[0], fixes.get(dtypes[0])), program)
    msg = (
        f"matrix kernels on CUDA cores take {value:.0f}% of GPU time {where(stats)} ({ms(per.per_step(m.cuda_ns))} "
        f"a step, {'/'.join(dtypes)}: {names}); {_rates(roof, fixes)}{_memory_bound(m)}; {wins(per, saving)}. "
        f"Fix: {advice}"
    )
    return timed("NO_TENSOR_CORES", value, t.NO_TENSOR_CORES, msg, per, saving)


def kept_share(found: tuple[str, float, float] | None) -> float:
    """The share of the CUDA-core time that work keeps on the tensor cores (``found``: the fix's type, its
    tensor peak, the CUDA cores' peak): the peaks' ratio over :data:`TENSOR_SHARE`, but never counted less
    than twice as fast where the peaks themselves say so (GeForce, L4, A10: bf16 or TF32 at twice fp32)."""
    if found is None:
        return UNKNOWN_GAIN
    ratio = found[2] / found[1]
    return min(ratio / TENSOR_SHARE, max(ratio, UNKNOWN_GAIN))


def _advice(dtype: str, found: tuple[str, float, float] | None) -> str:
    """The fix for the type that takes most of the CUDA-core time: TF32 (or autocast), autocast alone
    where the GPU's TF32 gains little (V100: none; GeForce: fp32's rate), or shapes and layouts for 16-bit."""
    if dtype not in ("fp32", "tf32"):
        return "NO_TENSOR_CORES_16"
    return "NO_TENSOR_CORES_AMP" if found is not None and found[0] != "tf32" else "NO_TENSOR_CORES"


def _rates(roof: Roofline, fixes: dict[str, tuple[str, float, float] | None]) -> str:
    """What the tensor cores would do instead: "on the H200 SXM's tensor cores TF32 runs 494.5 TFLOP/s to
    fp32's 67.0 (counted 5.5x faster: 75% of the peaks' ratio)"."""
    said = [
        f"{f[0].upper()} runs {f[1]:,.1f} TFLOP/s to {d}'s {f[2]:,.1f} ({_counted(f)})" for d, f in fixes.items() if f
    ]
    if not said:
        return "the GPU's peaks are not known (--peak): its tensor cores taken as twice as fast"
    return f"on the {roof.device.model}'s tensor cores " + "; ".join(said)


def _counted(found: tuple[str, float, float]) -> str:
    gain = 1 / kept_share(found)
    scaled = kept_share(found) == found[2] / found[1] / TENSOR_SHARE
    return f"counted {gain:.1f}x faster" + (f": {TENSOR_SHARE:.0%} of the peaks' ratio" if scaled else "")


def _memory_bound(m: MatrixTime) -> str:
    if m.cuda_memory_bound_ns * 100 < m.cuda_ns:  # under 1%: not worth a word
        return ""
    return f" ({m.cuda_memory_bound_ns * 100 / m.cuda_ns:.0f}% of the time is memory-bound: no gain there)"


def low_mfu(stats: ScopeStats, roof: Roofline, t: Thresholds, program: Program) -> Finding | None:
    """MFU below its threshold, where most of the matrix time's FLOPs are known; the saving: the tensor-core
    kernels' time beyond ``mfu_roof_pct`` % of their roofs (see the module)."""
    if roof.mfu_pct is None or roof.achieved_tflops is None or not roof.flops_per_step:
        return None
    if roof.matrix.flops_known_pct < t.mfu_known_pct or roof.mfu_pct >= t.LOW_MFU:
        return None
    per = per_of(stats)
    rated = [k for k in roof.kernels if k.engine == "tensor" and k.pct_of_roof is not None and k.known_ns]
    saving = per.per_step(below_roof(rated, t.mfu_roof_pct))
    matrix = roof.matrix.matrix_ns / max(roof.steps, 1) / max(roof.gpus, 1)
    msg = (
        f"MFU {roof.mfu_pct:.1f}% {where(stats)}: {roof.flops_per_step / 1e12:,.2f} TFLOP a step in "
        f"{ms(roof.step_ns)}, {roof.achieved_tflops:,.1f} TFLOP/s against the {roof.device.model}'s "
        f"{roof.mfu_peak_tflops:,.1f} TFLOP/s {roof.mfu_basis}; matrix kernels run {ms(matrix)} of the step"
        f"{_on_roofs(rated, t.mfu_roof_pct)}; {wins(per, saving)}. Fix: {fix('LOW_MFU', program)}"
    )
    # Information, never an alarm: MFU is low on most real models (attention, normalisation and small
    # GEMMs run below the tensor roof), and no single change of the program lifts it; its saving is
    # shown and ranked, its severity stays low (a healthy GPU-bound run gets no medium finding)
    return dataclasses.replace(timed("LOW_MFU", roof.mfu_pct, t.LOW_MFU, msg, per, saving), severity="low")


def below_roof(rated: list[KernelRoof], target_pct: float) -> float:
    """The time of ``rated`` kernel names beyond what their known work would take at ``target_pct`` % of the
    roof that binds it (ns, over the scope)."""
    return sum(k.known_ns * (1 - (k.pct_of_roof or 0) / target_pct) for k in rated if (k.pct_of_roof or 0) < target_pct)


def _on_roofs(rated: list[KernelRoof], target_pct: float) -> str:
    """ "; its tensor-core kernels reach 52% of their roofs (time-weighted), furthest below: fmha_... at 24%
    (memory-bound)"."""
    ns = sum(k.known_ns for k in rated)
    if not ns:
        return ""
    mean = sum(k.known_ns * (k.pct_of_roof or 0) for k in rated) / ns
    said = f"; its tensor-core kernels reach {mean:.0f}% of their roofs (time-weighted)"
    worst = max(rated, key=lambda k: below_roof([k], target_pct))
    if not below_roof([worst], target_pct):
        return said
    name = fit([kernel_label(worst.name)], 40)[0]
    return f"{said}, furthest below: {name} at {worst.pct_of_roof:.0f}% ({worst.bound}-bound)"


CHECKS: tuple[Callable[[ScopeStats, Roofline, Thresholds, Program], Finding | None], ...] = (
    no_tensor_cores,
    low_mfu,
)
