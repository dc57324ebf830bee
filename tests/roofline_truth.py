"""Independent count of the matrix work in raw profiles (no traceconv code): the FLOPs of the operators that
run matrix products themselves, by the textbook formulas, and the GPU time of the matrix kernels that
run on the CUDA cores by the issue's plain rule (their names say ffma, simt or sgemm).

- GEMMs: ``aten::mm`` (A[M,K] B[K,N]), ``aten::addmm`` (bias, A, B), ``aten::bmm``: 2 M K N (per batch);
- attention (PyTorch's memory-efficient and cuDNN kernels): forward 4 B H L^2 D (two products of L x L
  scores with D-wide rows; B L H D inputs for ``_efficient_attention_*``), backward 2.5 times that;
- convolutions: ``cudnn_convolution`` 2 N C_out H_out W_out C_in k_h k_w (groups 1), and
  ``convolution_backward`` that once per gradient its output mask asks for (input, weight).
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

from .kineto_truth import load, to_ns

CUDA_CORE_NAMES = re.compile(r"ffma|simt|sgemm", re.IGNORECASE)
GEMMS = ("aten::mm", "aten::addmm", "aten::bmm")


def _prod(xs: list[int]) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


def _pair(text: str) -> list[int]:
    return [int(v) for v in text.strip("[]").split(",")]


def op_flops(name: str, dims: list[Any], concrete: list[Any]) -> float:
    """FLOPs of one call, 0 for anything that is no matrix product of its own."""
    if name == "aten::mm":
        (m, k), (_, n) = dims[0], dims[1]
        return 2 * m * k * n
    if name == "aten::addmm":
        (m, k), (_, n) = dims[1], dims[2]
        return 2 * m * k * n
    if name == "aten::bmm":
        (b, m, k), (_, _, n) = dims[0], dims[1]
        return 2 * b * m * k * n
    if name == "aten::_efficient_attention_forward":  # B L H D
        b, length, h, d = dims[0]
        return 4 * b * h * length * length * d
    if name == "aten::_efficient_attention_backward":
        b, length, h, d = dims[1]
        return 2.5 * 4 * b * h * length * length * d
    if name == "aten::_cudnn_attention_forward":  # B H L D
        b, h, length, d = dims[0]
        return 4 * b * h * length * length * d
    if name == "aten::_cudnn_attention_backward":
        b, h, length, d = dims[1]
        return 2.5 * 4 * b * h * length * length * d
    if name == "aten::cudnn_convolution":  # (input, weight, padding, stride, dilation, groups, ...)
        (n, c, hi, wi), (co, _, kh, kw) = dims[0], dims[1]
        pad, stride, dil = _pair(concrete[2]), _pair(concrete[3]), _pair(concrete[4])
        ho = (hi + 2 * pad[0] - dil[0] * (kh - 1) - 1) // stride[0] + 1
        wo = (wi + 2 * pad[1] - dil[1] * (kw - 1) - 1) // stride[1] + 1
        return 2 * n * co * ho * wo * c * kh * kw
    if name == "aten::convolution_backward":  # (grad_output, input, weight, ..., output_mask)
        (n, co, ho, wo), (_, c, _, _), (_, _, kh, kw) = dims[0], dims[1], dims[2]
        mask = [t.strip() == "True" for t in concrete[10].strip("[]").split(",")]
        return 2 * n * co * ho * wo * c * kh * kw * sum(mask[:2])
    return 0


def _steps(events: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """The host ranges of ``ProfilerStep#N`` (not their GPU-side copies)."""
    return [
        (to_ns(e["ts"]), to_ns(e["ts"]) + to_ns(e["dur"]))
        for e in events
        if str(e["name"]).startswith("ProfilerStep#") and e.get("cat") in ("cpu_op", "user_annotation")
    ]


def json_matrix_flops(path: Path) -> tuple[float, int]:
    """From a PyTorch trace: the FLOPs of the operators inside its ``ProfilerStep#N`` ranges (all of them
    without such ranges; a GEMM's own ``flops`` argument where ``with_flops`` wrote one), and how many ranges."""
    events = [e for e in load(path)["traceEvents"] if e.get("ph") == "X"]
    steps = _steps(events)
    total = 0.0
    for e in events:
        if e.get("cat") != "cpu_op" or "Input Dims" not in e.get("args", {}):
            continue
        start = to_ns(e["ts"])
        if steps and not any(a <= start <= b for a, b in steps):
            continue
        given = e["args"].get("flops") if e["name"] in GEMMS else None  # with_flops: torch's own 2 M K N
        total += given or op_flops(e["name"], e["args"]["Input Dims"], e["args"].get("Concrete Inputs", []))
    return total, max(len(steps), 1)


def sqlite_matrix_flops(path: Path) -> tuple[float, int]:
    """From an Nsight Systems export with ``--pytorch=autograd-shapes-nvtx``: the same count from the ranges'
    ``sizes = [...]`` inside the ``step_N`` ranges."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    rows = db.execute(
        "SELECT coalesce(text, (SELECT value FROM StringIds WHERE id = textId)), start, end FROM NVTX_EVENTS"
    ).fetchall()
    db.close()
    steps = [(s, e) for t, s, e in rows if t and re.fullmatch(r"step_\d+", t) and e is not None]
    total = 0.0
    for text, start, _ in rows:
        m = re.match(r"([^,]+), .*?sizes = (\[.*?\]\])", text or "")
        if m and any(a <= start <= b for a, b in steps):
            total += op_flops(m.group(1), json.loads(m.group(2)), [])
    return total, len(steps)


def json_cuda_core_gemm_ns(path: Path) -> tuple[int, int]:
    """From a PyTorch trace: the time of the kernels named as CUDA-core GEMMs whose launch call lies in a
    ``ProfilerStep#N`` range (a kernel whose call the trace lacks was launched before the steps: the
    profiler's warm-up step, whose calls torch drops), and how many ranges."""
    events = [e for e in load(path)["traceEvents"] if e.get("ph") == "X"]
    steps = _steps(events)
    launch = {
        e["args"]["correlation"]: to_ns(e["ts"])
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "args" in e
    }
    total = 0
    for e in events:
        if e.get("cat") == "kernel" and CUDA_CORE_NAMES.search(e["name"]) and "tf32" not in e["name"]:
            at = launch.get(e["args"].get("correlation"))
            if at is not None and any(a <= at <= b for a, b in steps):
                total += to_ns(e["dur"])
    return total, len(steps)


def json_gpu_span_ns(path: Path) -> int:
    """From a PyTorch trace: the first GPU row's start to the last one's end (one device)."""
    gpu = [e for e in load(path)["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    return max(to_ns(e["ts"]) + to_ns(e["dur"]) for e in gpu) - min(to_ns(e["ts"]) for e in gpu)


def device_names(path: Path) -> list[str]:
    """The GPUs' names as the profile writes them: Kineto's deviceProperties, nsys' TARGET_INFO_GPU."""
    if path.suffix == ".sqlite":
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        names = [r[0] for r in db.execute("SELECT name FROM TARGET_INFO_GPU")]
        db.close()
        return names
    return [p["name"] for p in load(path).get("deviceProperties", [])]


def program_step_ns(profile: Path) -> float | None:
    """The median step as the profiled program clocked it itself (``tests/tools/planted``: CUDA events recorded
    at the end of each step, ``gpu_step_ms`` in ``<stem>.<profiler>.meta.json`` beside the profile), None
    without that file. ``profile``: the profile's name under ``fixtures/`` (``.../train_bf16.json``)."""
    stem = profile.name.split(".")[0]
    meta = profile.with_name(f"{stem}.{'nsys' if '.sqlite' in profile.name else 'torch'}.meta.json")
    if not meta.exists():
        return None
    gpu_ms = sorted(json.loads(meta.read_text())["gpu_step_ms"])
    mid = len(gpu_ms) // 2
    return (gpu_ms[mid] if len(gpu_ms) % 2 else (gpu_ms[mid - 1] + gpu_ms[mid]) / 2) * 1e6
