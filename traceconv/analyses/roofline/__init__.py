"""How far the GPU work is from what the GPU can do: tensor cores or not, achieved FLOP/s and bandwidth
against the GPU's peaks, MFU.

:func:`roofline` measures one scope (the steps, else the whole window), in the order the data flows:

1. :mod:`.device`: the GPU, from the profile's own description, and its peaks (:mod:`.peaks`, a table
   with a source per row; ``--peak NAME=VALUE`` overrides);
2. :mod:`.attribution`: every kernel, its engine (:mod:`.tensor_cores`: tensor cores or CUDA cores,
   by its name; by GPU metrics' Tensor Active where the name does not tell) and its share of its
   operator's work (:mod:`.flops`: FLOPs and least traffic from the profiler's ``flops`` or the input
   shapes);
3. :mod:`.tables`: per operator name, per kernel name and per step, placed on the roofline
   (:mod:`.position`).

Figures are per GPU: the FLOPs of the kernels launched in the scope, over the GPUs that ran them and
the steps. ``achieved_tflops`` is a step's FLOPs over the step time (the summary's: the median step as
the program lived it; without steps, the GPUs' span of work), and ``mfu_pct`` that over the GPU's
dense bf16 tensor-core peak (fp16 where it has no bf16): MFU as it is usually quoted, whatever type
the work ran in. Only the work the profile describes counts: operators without recorded shapes
(``record_shapes=False``), fused Triton kernels and CUDA graphs replayed whole add time but no FLOPs
(``matrix.flops_known_pct`` says how much of the matrix time that leaves out).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceconv.analyses import metrics as U
from traceconv.analyses.roofline import attribution as A
from traceconv.analyses.roofline import tables as TB
from traceconv.analyses.roofline.device import device
from traceconv.analyses.roofline.peaks import parse
from traceconv.analyses.roofline.results import KernelRoof, MatrixTime, OpRoof, Roofline
from traceconv.analyses.source import Source

__all__ = ["Roofline", "Windows", "cut", "kernel_roofs", "op_roofs", "parse", "roofline"]
TENSOR_ACTIVE = "tensor_active_pct"


@dataclass(frozen=True)
class Windows:
    """Where a scope's kernels are (by the start of their launch: ``host_*``, sorted and disjoint) and
    how long each of its windows took (``dur_ns``: the steps as the program lived them)."""

    name: str  # "steps" or "window"
    host_start_ns: np.ndarray
    host_end_ns: np.ndarray
    dur_ns: np.ndarray


def roofline(
    source: Source, windows: Windows | None, overrides: Mapping[str, float | str] | None = None, top: int = 0
) -> Roofline:
    """The roofline of ``windows``' kernels (None: every kernel, over the span of their work); ``top``
    operator and kernel rows (0: all)."""
    active = _tensor_active(source)
    # no operator's work to share out: a row per kernel name, GPU and window is enough
    if A.has_work(source):
        every = A.kernels(A.read(source), active)
    else:
        bounds = (windows.host_start_ns, windows.host_end_ns) if windows is not None else None
        every = A.kernels(A.read_grouped(source, bounds), active)
    dev = device(source.trace_metadata(), _per_device(every), overrides or {})
    if windows is None:
        windows = _whole(every)
    step = _in_steps(every, windows)
    k = every[step >= 0].reset_index(drop=True)
    del every  # the scope's kernels are all that is needed from here
    gpus = max(k.groupby(["trace_id", "device"], observed=True).ngroups, 1) if len(k) else 1
    peaks = dev.peaks
    basis, peak = peaks.mfu_basis() if peaks else (None, None)
    step_ns = round(float(np.median(windows.dur_ns))) if len(windows.dur_ns) else 0
    flops = float(k["flops"].sum()) / gpus / max(len(windows.dur_ns), 1)
    known = bool(k["known"].any())
    # a step's FLOP/s only where some FLOPs are known: without them, every step's row would read zero
    per_step = TB.step_rows(k, step[step >= 0], windows.dur_ns, gpus, peak) if known and windows.name == "steps" else []
    achieved = flops / step_ns / 1e3 if known and step_ns else None
    ops, kernels = TB.op_rows(k, peaks), TB.kernel_rows(k, peaks, active)
    matrix = TB.matrix_time(k, peaks)
    return Roofline(
        device=dev,
        scope=windows.name,
        steps=len(windows.dur_ns),
        gpus=gpus,
        step_ns=step_ns,
        flops_per_step=round(flops) if known else None,
        bytes_per_step=round(float(k["moved"].sum()) / gpus / max(len(windows.dur_ns), 1)) if known else None,
        achieved_tflops=round(achieved, 2) if achieved is not None else None,
        mfu_pct=round(achieved * 100.0 / peak, 2) if achieved is not None and peak else None,
        mfu_basis=f"{basis} dense tensor-core peak" if basis else None,
        mfu_peak_tflops=peak,
        matrix=matrix,
        ops=ops[:top] if top else ops,
        kernels=kernels[:top] if top else kernels,
        per_step=per_step,
        notes=_notes(dev.note, known, matrix),
    )


def cut(r: Roofline, top: int) -> Roofline:
    """``r`` with its operator and kernel rows cut to the first ``top`` (0: all)."""
    return dataclasses.replace(r, ops=r.ops[:top], kernels=r.kernels[:top]) if top else r


def op_roofs(source: Source, overrides: Mapping[str, float | str] | None = None) -> list[OpRoof]:
    """Every operator name whose work is known, on the roofline (``traceconv ops``)."""
    every = A.kernels(A.read(source), _tensor_active(source))
    return TB.op_rows(every, device(source.trace_metadata(), _per_device(every), overrides or {}).peaks)


def kernel_roofs(source: Source, overrides: Mapping[str, float | str] | None = None) -> list[KernelRoof]:
    """Every kernel name of the input with its engine and place on the roofline (``traceconv kernels``)."""
    active = _tensor_active(source)
    every = A.kernels(A.read(source) if A.has_work(source) else A.read_grouped(source), active)
    dev = device(source.trace_metadata(), _per_device(every), overrides or {})
    return TB.kernel_rows(every, dev.peaks, active)


def _tensor_active(source: Source) -> dict[str, float] | None:
    """GPU metrics' Tensor Active inside each kernel name's executions, where the input has them."""
    if not U.has_metrics(source):
        return None
    per = U.per_kernel(source, (TENSOR_ACTIVE,)).dropna(subset=[TENSOR_ACTIVE])
    return {str(n): round(float(v), 2) for n, v in zip(per["name"], per[TENSOR_ACTIVE], strict=True)}


def _per_device(k: pd.DataFrame) -> dict[int, int]:
    sums = k.groupby("device")["dur_ns"].sum()
    return {int(d): int(ns) for d, ns in zip(sums.index, sums.to_numpy(), strict=True) if d >= 0}


def _whole(k: pd.DataFrame) -> Windows:
    """Without steps: one window, every kernel in it, as long as the GPUs' span of kernel work."""
    if not len(k):
        return Windows("window", np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros(1, np.int64))
    last = k["last_anchor_ns"] if "last_anchor_ns" in k.columns else k["anchor_ns"]
    lo, hi = int(k["anchor_ns"].min()), int(last.max())
    return Windows("window", np.array([lo]), np.array([hi]), np.array([_span(k)]))


def _span(k: pd.DataFrame) -> int:
    """The longest span of one GPU's kernel work, from the start of its first kernel to the end of its last."""
    gpu = [k["trace_id"], k["device"]]
    end = k["end_ns"] if "end_ns" in k.columns else k["start_ns"] + k["dur_ns"]
    ends = end.groupby(gpu, observed=True).max()
    spans = ends - k["start_ns"].groupby(gpu, observed=True).min()
    return int(spans.max()) if len(spans) else 0


def _in_steps(k: pd.DataFrame, w: Windows) -> np.ndarray:
    """Each kernel's window (:func:`_window_of`); in steps, a kernel whose launch the trace does not hold,
    where it holds others', is in none: it was launched before them (the GPU work of torch.profiler's
    warm-up step, whose calls it drops, runs on into the first step: 11 of the 128 ms of CUDA-core time
    of the H200 fp32 MLP's five steps)."""
    step = _window_of(k["anchor_ns"].to_numpy(), w)
    linked = k["linked"].to_numpy()
    return np.where(linked, step, -1) if w.name == "steps" and linked.any() else step


def _window_of(anchor: np.ndarray, w: Windows) -> np.ndarray:
    """Each kernel's window (index into ``w``), -1 outside every one."""
    at = np.searchsorted(w.host_start_ns, anchor, side="right") - 1
    ok = (at >= 0) & (anchor <= w.host_end_ns[np.maximum(at, 0)])
    return np.where(ok, at, -1)


def _notes(device_note: str | None, known: bool, matrix: MatrixTime) -> list[str]:
    notes = [device_note] if device_note else []
    if matrix.matrix_ns and not known:
        notes.append(
            "no operator's FLOPs are known (record_shapes=True in torch.profiler, or nsys "
            "--pytorch=autograd-shapes-nvtx, records the shapes they are counted from): no achieved FLOP/s, no MFU"
        )
    elif matrix.matrix_ns and matrix.flops_known_pct < 90:
        notes.append(
            f"the FLOPs of {100 - matrix.flops_known_pct:.0f}% of the matrix kernels' time are not known (operators "
            "without shapes, fused or graph-replayed kernels): achieved FLOP/s and MFU count the rest"
        )
    return notes
