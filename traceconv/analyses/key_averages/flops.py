"""FLOPs of an operator as torch estimates them with ``with_flops=True`` (``torch/csrc/profiler/util.cpp``,
``saveExtraArgs`` and ``computeFlops``), from the ``Input Dims`` and ``Concrete Inputs`` the
trace keeps (``record_shapes=True``): matrix products (2 M K N, per batch), ``aten::add`` and
``aten::mul`` (the first input's elements), ``aten::conv2d`` (2 N H_out W_out kH kW C_in C_out /
groups). Every other event has none.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from traceconv.analyses.key_averages.events import I64

# operator -> (positions of the two matrices) for torch's gemm-like estimates
_GEMM = {"aten::mm": (0, 1), "aten::addmm": (1, 2)}
_BATCHED = {"aten::bmm": (0, 1), "aten::baddbmm": (1, 2)}
_ELEMENTWISE = ("aten::add", "aten::mul")
NAMES = frozenset({*_GEMM, *_BATCHED, *_ELEMENTWISE, "aten::conv2d"})


def flops(names: list[str], name: I64, args: pa.ChunkedArray, rows: I64) -> I64:
    """Per row of ``rows`` (indices into ``args``, ``name``): torch's FLOPs estimate, 0 where it has none."""
    out = np.zeros(len(rows), np.int64)
    wanted = np.array([n in NAMES for n in names] + [False], bool)[name[rows]]
    picked = np.flatnonzero(wanted)
    if not len(picked):
        return out
    texts = pc.fill_null(args.take(pa.array(rows[picked])), "").to_pylist()
    for k, text in zip(picked, texts, strict=True):
        if text:
            out[k] = estimate(names[name[rows[k]]], orjson.loads(text))
    return out


def estimate(op: str, args: dict[str, Any]) -> int:
    """``computeFlops`` of one call, from its trace arguments."""
    dims = args.get("Input Dims")
    if not isinstance(dims, list):
        return 0
    if op in _GEMM or op in _BATCHED:
        a, b = _GEMM.get(op) or _BATCHED[op]
        if len(dims) <= b or not _sizes(dims[a]) or not _sizes(dims[b]):
            return 0
        return _gemm(dims[a], dims[b], batched=op in _BATCHED)
    if op in _ELEMENTWISE:
        return math.prod(dims[0]) if dims and _sizes(dims[0]) is not None else 0
    return _conv2d(dims, args.get("Concrete Inputs"))


def _sizes(d: Any) -> list[int] | None:
    return d if isinstance(d, list) and all(isinstance(x, int) for x in d) else None


def _gemm(mat1: list[int], mat2: list[int], batched: bool) -> int:
    if not mat1 or mat1[-1] == 0 or (batched and mat1[0] == 0):
        return 0
    flops = math.prod(mat1) // mat1[-1]
    if batched:
        flops //= mat1[0]
    return flops * math.prod(mat2) * 2


def _conv2d(dims: list[Any], concrete: Any) -> int:
    """aten::conv2d(input, weight, bias, stride, padding, dilation, groups)."""
    if len(dims) < 2 or not isinstance(concrete, list) or len(concrete) < 7:
        return 0
    x, w = _sizes(dims[0]), _sizes(dims[1])
    try:
        stride, padding, dilation = (orjson.loads(str(concrete[i])) for i in (3, 4, 5))
        groups = int(concrete[6])
    except (orjson.JSONDecodeError, ValueError, TypeError):
        return 0
    if not x or not w or len(x) != 4 or len(w) != 4 or not groups:
        return 0
    if not all(isinstance(v, list) and len(v) == 2 for v in (stride, padding, dilation)) or 0 in stride:
        return 0
    n, c_in, h, wd = x
    c_out, _, kh, kw = w
    out_h = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    out_w = (wd + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    return int(2 * n * out_h * out_w * kh * kw * c_in * c_out // groups)
