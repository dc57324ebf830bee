"""The work of one operator call: its floating-point operations and the least memory traffic it needs.

From the trace's own figure where the profiler wrote one (``with_flops=True``: the ``flops`` argument),
else from the input shapes (PyTorch ``record_shapes``: ``Input Dims``, ``Input type``, ``Concrete
Inputs``; Nsight Systems ``--pytorch=autograd-shapes-nvtx``: the ``sizes = [...]`` of the range's name,
which carries no types and no scalar arguments):

- matrix products: ``mm``, ``addmm``, ``bmm``, ``baddbmm`` as torch counts them (2 M K N, per batch:
  :func:`traceconv.analyses.key_averages.flops.estimate`); ``_addmm_activation``, ``_scaled_mm`` alike;
  ``matmul`` and ``linear`` (their batch dimensions broadcast) where they launch the kernels themselves;
  ``mv``, ``addmv``, ``dot``: 2 M K, 2 K;
- attention (SDPA and the flash, memory-efficient and cuDNN kernels it dispatches to): 2 B H Lq Lk (D +
  Dv) forward, half of it causal; backward 2.5 times the forward (the recomputed scores and four
  products: FlashAttention's own count); the layout of each operator's inputs (B H L D, or B L H D for
  ``_flash_attention_*``/``_efficient_attention_*``) and where its causal flag sits are in :data:`ATTENTION`;
- convolutions (``cudnn_convolution``, ``convolution``, ``_convolution``, ``conv1d/2d/3d``,
  ``miopen_convolution``; transposed ones too): 2 x output elements x C_in/groups x kernel size;
  ``convolution_backward``: that for each gradient its ``output_mask`` asks for (input, weight).
  Convolutions need the stride, padding and dilation (``Concrete Inputs``): none under Nsight Systems.

The traffic is each tensor input read once and the output written once (``elements``, times the type's
size where known): the least a kernel can move, the memory roof's side of the roofline. Which operator
a kernel's work belongs to is the innermost one around its launch (the row's ``op_event_id``): an
``aten::linear`` whose ``aten::addmm`` launched the GEMM has none of its own, so nothing counts twice.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import orjson

from traceconv.analyses.key_averages.flops import estimate

# "Input type" of PyTorch traces -> (type, bytes an element)
TYPES = {
    "double": ("fp64", 8),
    "float": ("fp32", 4),
    "c10::Half": ("fp16", 2),
    "c10::BFloat16": ("bf16", 2),
    "c10::Float8_e4m3fn": ("fp8", 1),
    "c10::Float8_e5m2": ("fp8", 1),
    "c10::Float8_e4m3fnuz": ("fp8", 1),
    "c10::Float8_e5m2fnuz": ("fp8", 1),
}
SIZES = {"fp64": 8, "fp32": 4, "tf32": 4, "3xtf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}
BACKWARD_FACTOR = 2.5  # attention backward / forward (FlashAttention's benchmarks count it so)


@dataclass(frozen=True)
class Work:
    """One call's work: FLOPs, the elements it must read and write, its inputs' type (None: not recorded)."""

    flops: int
    elements: int
    dtype: str | None
    family: str  # gemm, attention, conv
    source: str  # "flops_arg" (the profiler's own figure) or "shapes"


@dataclass(frozen=True)
class Attention:
    q: int  # positions of query, key and value among the inputs
    seq_axis: int  # where the sequence length is in their shapes
    causal: int  # position of the causal flag (is_causal, or custom_mask_type: nonzero is causal)
    backward: bool


ATTENTION = {
    "aten::scaled_dot_product_attention": Attention(0, 2, 5, False),
    "aten::_scaled_dot_product_flash_attention": Attention(0, 2, 4, False),
    "aten::_scaled_dot_product_efficient_attention": Attention(0, 2, 6, False),
    "aten::_scaled_dot_product_cudnn_attention": Attention(0, 2, 6, False),
    "aten::_cudnn_attention_forward": Attention(0, 2, 10, False),
    "aten::_flash_attention_forward": Attention(0, 1, 8, False),
    "aten::_efficient_attention_forward": Attention(0, 1, 9, False),
    "aten::_scaled_dot_product_flash_attention_backward": Attention(1, 2, 11, True),
    "aten::_scaled_dot_product_efficient_attention_backward": Attention(1, 2, 11, True),
    "aten::_scaled_dot_product_cudnn_attention_backward": Attention(1, 2, 14, True),
    "aten::_cudnn_attention_backward": Attention(1, 2, 14, True),
    "aten::_flash_attention_backward": Attention(1, 1, 11, True),
    "aten::_efficient_attention_backward": Attention(1, 1, 14, True),
}
_GEMM = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"})
_GEMM_ALIKE = {"aten::_addmm_activation": "aten::addmm", "aten::_scaled_mm": "aten::mm", "aten::_int_mm": "aten::mm"}
_GEMV = {"aten::mv": 0, "aten::addmv": 1, "aten::dot": 0, "aten::vdot": 0}
# convolution -> (stride, padding, dilation, transposed, groups) positions among its inputs (None: not taken)
CONV = {
    "aten::cudnn_convolution": (3, 2, 4, None, 5),
    "aten::miopen_convolution": (4, 3, 5, None, 6),
    "aten::convolution": (3, 4, 5, 6, 8),
    "aten::_convolution": (3, 4, 5, 6, 8),
    "aten::conv1d": (3, 4, 5, None, 6),
    "aten::conv2d": (3, 4, 5, None, 6),
    "aten::conv3d": (3, 4, 5, None, 6),
    "aten::cudnn_convolution_transpose": (4, 3, 5, True, 6),
}
NAMES = frozenset({*_GEMM, *_GEMM_ALIKE, *_GEMV, "aten::matmul", "aten::linear", *ATTENTION, *CONV})
FAMILY_PREFIXES = tuple(sorted({*NAMES, "aten::convolution_backward"}))
_SIZES = re.compile(r"sizes = ")


def work(name: str, args: str | None, seen: dict[object, Work | None] | None = None) -> Work | None:
    """The work of one call of operator ``name`` (an NVTX range's whole text under Nsight Systems) whose
    trace arguments are ``args`` (JSON text, or None); None where it is no matrix work or unknown.
    ``seen``: the work of the calls counted before, by their text (calls of one shape whose arguments
    read alike are parsed once) and by what it depends on (an operator's calls repeat a few shapes,
    each in arguments of their own)."""
    if not counted(name):
        return None
    text = (name, args)
    if seen is not None and text in seen:
        return seen[text]
    op, dims, types, concrete = _inputs(name, args)
    given = _flops_arg(args)
    if seen is None:
        return _work(op, dims, types, concrete, given)
    key = orjson.dumps([op, dims, types, concrete, given])
    if key not in seen:
        seen[key] = _work(op, dims, types, concrete, given)
    seen[text] = seen[key]
    return seen[key]


def counted(name: str) -> bool:
    """Whether the calls of operator ``name`` (or an NVTX range's whole text) are ones whose work is counted."""
    op = _op(name)
    return op in NAMES or op == "aten::convolution_backward"


def _op(name: str) -> str:
    return name.split(",", 1)[0].strip()


def _work(op: str, dims: list[Any] | None, types: list[Any], concrete: list[Any], given: int | None) -> Work | None:
    found = _shapes_work(op, dims, concrete) if dims is not None else None
    dtype = _dtype(types)
    if given is not None:
        family = found[2] if found else "other"
        return Work(given, found[1] if found else 0, dtype, family, "flops_arg")
    if found is None or found[0] <= 0:
        return None
    return Work(found[0], found[1], dtype, found[2], "shapes")


def _inputs(name: str, args: str | None) -> tuple[str, list[Any] | None, list[Any], list[Any]]:
    """The operator's name and its inputs' shapes, types and concrete values, from the trace arguments or
    (Nsight Systems) from the range's own text: ``aten::mm, seq = 5, op_id = 9, sizes = [[4, 8], [8, 2]], ...``."""
    op = _op(name)
    if args:
        try:
            value = orjson.loads(args)
        except orjson.JSONDecodeError:
            value = None
        if isinstance(value, dict) and isinstance(value.get("Input Dims"), list):
            types, concrete = value.get("Input type"), value.get("Concrete Inputs")
            return op, value["Input Dims"], types if isinstance(types, list) else [], concrete or []
    m = _SIZES.search(name)
    return op, (_bracketed(name, m.end()) if m else None), [], []


def _bracketed(text: str, at: int) -> list[Any] | None:
    """The JSON list that starts at ``text[at]``."""
    depth = 0
    for i in range(at, len(text)):
        depth += {"[": 1, "]": -1}.get(text[i], 0)
        if depth == 0:
            try:
                found = orjson.loads(text[at : i + 1])
            except orjson.JSONDecodeError:
                return None
            return found if isinstance(found, list) else None
    return None


def _flops_arg(args: str | None) -> int | None:
    if not args or '"flops"' not in args:
        return None
    parsed = orjson.loads(args)
    value = parsed.get("flops") if isinstance(parsed, dict) else None
    return int(value) if isinstance(value, (int, float)) and value > 0 else None


def _dtype(types: list[Any]) -> str | None:
    for t in types:
        if isinstance(t, str) and t in TYPES:
            return TYPES[t][0]
    return None


def _shape(d: Any) -> list[int] | None:
    return d if isinstance(d, list) and d and all(isinstance(x, int) and x >= 0 for x in d) else None


def _elements(dims: list[Any]) -> int:
    return sum(math.prod(s) for d in dims if (s := _shape(d)))


def _shapes_work(op: str, dims: list[Any], concrete: list[Any]) -> tuple[int, int, str] | None:
    """(FLOPs, elements read and written, family) from the input shapes."""
    if op in _GEMM or op in _GEMM_ALIKE:
        gemm = _GEMM_ALIKE.get(op, op)
        at = 1 if gemm in ("aten::addmm", "aten::baddbmm") else 0
        flops = estimate(gemm, {"Input Dims": dims})
        if not flops or len(dims) <= at + 1:
            return None
        return flops, _elements(dims) + _product_out(_shape(dims[at]), _shape(dims[at + 1])), "gemm"
    if op in ("aten::matmul", "aten::linear"):
        return _matmul(op, dims)
    if op in _GEMV:
        return _gemv(op, dims)
    if op in ATTENTION:
        return _attention(ATTENTION[op], dims, concrete)
    if op == "aten::convolution_backward":
        return _conv_backward(dims, concrete)
    return _conv(op, dims, concrete)


def _product_out(a: list[int] | None, b: list[int] | None) -> int:
    if not a or not b:
        return 0
    return math.prod(a[:-1]) * b[-1]


def _matmul(op: str, dims: list[Any]) -> tuple[int, int, str] | None:
    a, b = (_shape(dims[0]), _shape(dims[1])) if len(dims) >= 2 else (None, None)
    if not a or not b:
        return None
    if op == "aten::linear":  # x [..., K] @ weight [N, K]^T
        rows, k, n = math.prod(a[:-1]), a[-1], b[0] if len(b) == 2 else 1
        return 2 * rows * k * n, _elements(dims) + rows * n, "gemm"
    if len(a) == 1 or len(b) == 1:
        return _gemv("aten::mv", [a, b] if len(a) > 1 else [b, a])
    batch = _broadcast(a[:-2], b[:-2])
    m, k, n = a[-2], a[-1], b[-1]
    return 2 * batch * m * k * n, _elements(dims) + batch * m * n, "gemm"


def _broadcast(a: list[int], b: list[int]) -> int:
    size = max(len(a), len(b))
    a, b = [1] * (size - len(a)) + a, [1] * (size - len(b)) + b
    return math.prod(max(x, y) for x, y in zip(a, b, strict=True))


def _gemv(op: str, dims: list[Any]) -> tuple[int, int, str] | None:
    at = _GEMV[op]
    m = _shape(dims[at]) if len(dims) > at else None
    if not m:
        return None
    return 2 * math.prod(m), _elements(dims) + (m[0] if len(m) > 1 else 1), "gemm"


def _attention(spec: Attention, dims: list[Any], concrete: list[Any]) -> tuple[int, int, str] | None:
    if len(dims) < spec.q + 3:
        return None
    q, k, v = (_shape(dims[spec.q + i]) for i in range(3))
    if not q or not k or not v or len(q) != 4 or len(k) != 4 or len(v) != 4:
        return None
    lq, lk = q[spec.seq_axis], k[spec.seq_axis]
    rows = math.prod(q) // q[-1]  # B H Lq: every query's row of scores
    flops = 2 * rows * lk * (q[-1] + v[-1])
    flag = concrete[spec.causal] if len(concrete) > spec.causal else ""
    if str(flag) not in ("", "False", "0"):
        flops //= 2
    out = rows * v[-1]
    if spec.backward:
        return round(flops * BACKWARD_FACTOR), _elements(dims) + math.prod(q) + math.prod(k) + math.prod(v), "attention"
    return flops if lq and lk else 0, _elements(dims[spec.q : spec.q + 3]) + out, "attention"


def _ints(value: Any) -> list[int] | None:
    try:
        got = orjson.loads(str(value))
    except orjson.JSONDecodeError:
        return None
    return got if isinstance(got, list) and all(isinstance(x, int) for x in got) else None


def _conv(op: str, dims: list[Any], concrete: list[Any]) -> tuple[int, int, str] | None:
    if op not in CONV or len(dims) < 2:
        return None
    x, w = _shape(dims[0]), _shape(dims[1])
    stride_at, pad_at, dil_at, transposed_at, groups_at = CONV[op]
    if not x or not w or len(x) != len(w) or len(x) < 3 or len(concrete) <= groups_at:
        return None
    stride, pad, dil = (_ints(concrete[i]) for i in (stride_at, pad_at, dil_at))
    transposed = transposed_at is True or (isinstance(transposed_at, int) and str(concrete[transposed_at]) == "True")
    try:
        groups = int(concrete[groups_at])
    except (TypeError, ValueError):
        return None
    spatial = len(x) - 2
    if not stride or not pad or not dil or groups <= 0 or 0 in stride or not len(stride) == len(pad) == spatial:
        return None
    kernel = math.prod(w[2:])
    if transposed:  # each input element scatters into C_out/groups x kernel outputs
        flops = 2 * math.prod(x) * w[1] * kernel
        return flops, _elements(dims), "conv"
    out = [(x[2 + i] + 2 * pad[i] - dil[i] * (w[2 + i] - 1) - 1) // stride[i] + 1 for i in range(spatial)]
    if min(out) <= 0:
        return None
    outputs = x[0] * w[0] * math.prod(out)
    return 2 * outputs * (x[1] // groups) * kernel, _elements(dims[:3]) + outputs, "conv"


def _conv_backward(dims: list[Any], concrete: list[Any]) -> tuple[int, int, str] | None:
    """convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
    output_padding, groups, output_mask): each gradient asked for costs what the forward cost."""
    if len(dims) < 3:
        return None
    g, x, w = (_shape(d) for d in dims[:3])
    if not g or not x or not w or len(concrete) < 11:
        return None
    mask = _bools(concrete[10])
    try:
        groups = int(concrete[9])
    except (TypeError, ValueError):
        return None
    if mask is None or groups <= 0:
        return None
    transposed = str(concrete[7]) == "True"
    per_gradient = (
        2 * math.prod(x) * w[1] * math.prod(w[2:])
        if transposed
        else 2 * math.prod(g) * (x[1] // groups) * math.prod(w[2:])
    )
    wanted = sum(mask[:2])
    moved = _elements(dims[:3]) + (math.prod(x) if mask[0] else 0) + (math.prod(w) if mask[1] else 0)
    return per_gradient * wanted, moved, "conv"


def _bools(value: Any) -> list[bool] | None:
    text = str(value).strip()
    if not text.startswith("["):
        return None
    items = [t.strip() for t in text.strip("[]").split(",") if t.strip()]
    return [t == "True" for t in items] if len(items) >= 2 else None
