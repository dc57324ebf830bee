"""Whether a kernel does matrix work, and on which engine: tensor cores or CUDA cores, told by its name.

The libraries name their kernels after the instruction they are built on, and the rules below read
that. They are tried in order; the first that matches a name decides (:func:`classify`):

- ``direct``: direct (grouped, depthwise) convolutions: stencils, no matrix product; the libraries have
  no tensor-core form of them, whatever the precision: no matrix work here.
- ``helper``: the small kernels around a matrix product that are no matrix work themselves (split-K
  reductions, epilogues, offset tables, layout transposes, pooling that shares the ``xmma`` prefix).
- ``xmma``: cuBLAS' and cuDNN's ``sm80_xmma_gemm_f32f32_f32f32_f32_..._ffma_...`` family. ``ffma`` (a
  fused multiply-add on the CUDA cores) or types that are all ``f32`` mean CUDA cores; a ``tensor16x8x8``
  instruction shape, a ``warpgroupsize`` (Hopper's wgmma) or a tensor-core type among the types
  (``tf32``, ``bf16``, ``f16``, fp8) mean tensor cores.
- ``nvjet``: cuBLAS' generated kernels for Hopper and Blackwell: always tensor cores; the types are
  the letters after ``nvjet_``: ``t`` bf16, ``h`` fp16, ``q`` fp8, ``s`` tf32.
- ``wgmma``: Hopper's warpgroup MMA (and Blackwell's ``tcgen05``/``umma``), e.g. cuDNN's fused attention.
- ``tensorop``: CUTLASS 2 (``cutlass_80_tensorop_s1688gemm``, ``..._wmma_tensorop_bf16_...``) and the
  instruction shapes cuBLAS and cuDNN name (``h884``, ``s1688``, ``h16816``, ``i8816``, ``hmma``): tensor
  cores. ``s1688`` without another type is TF32 (fp32 data on Ampere's tensor cores).
- ``sm90+``: a GEMM built for Hopper or Blackwell (``cutlass3x_sm90_...``, ``bmm_..._sm100f``): tensor cores.
- ``attention``: flash, fmha, cuDNN SDPA kernels: tensor cores. PyTorch's memory-efficient attention in
  fp32 (``fmha_cutlassF_f32_..._sm80``) runs fp32 as 3xTF32 on them (three TF32 products each: a third
  of TF32's rate); its ``_sm50``/``_sm70``/``_sm75`` builds run fp32 on the CUDA cores.
- ``amd``: Tensile's ``Cijk_...`` with a matrix instruction (``_MI16x16x16``: MFMA), MIOpen's xdlops
  (``igemm_*_gtcx``), composable kernel's ``xdl``/``xdlops``: matrix cores; without them, vector units.
- ``triton``: Triton's matrix products (Inductor's GEMM templates, ``_matmul_ogs_``): tensor cores for
  16- and 8-bit types; fp32 unknown (TF32 or not is a setting the name does not carry). Inductor's
  pointwise and reduction kernels (``triton_poi_fused_addmm_gelu_0``: a decomposed addmm's epilogue) are
  no matrix work.
- ``simt``: CUDA-core GEMMs and convolutions: ``simt``, ``sgemm``, ``dgemm``, ``hgemm``, ``gemv``, cuBLAS'
  small-N ``gemmSN``/``gemmk1``, cuDNN's ``scudnn``, ``implicit_convolve_sgemm``, ``wgrad_alg0``,
  ``dgrad_engine``, Winograd and FFT convolutions; the type from the name (``sgemm`` fp32).
- ``unknown``: matrix work whose engine the name does not tell (Inductor's Triton GEMM templates, a
  user's own ``gemm`` kernel); GPU metrics' Tensor Active (Nsight Systems) can decide it
  (:func:`by_metric`).

Anything else is no matrix work. ``tests/golden/kernel_engines.csv`` holds every kernel name of the
corpus with what these rules make of it (``python -m tests.tools.kernel_engines`` writes it again).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class Engine:
    """What a kernel is: matrix work or not, on tensor cores or CUDA cores, in which type, by which rule."""

    rule: str  # the rule that decided (see the module); "none" for a kernel that is no matrix work
    matrix: bool
    engine: str | None  # "tensor", "cuda", or None: unknown (or no matrix work)
    dtype: str | None  # fp64, fp32, tf32, bf16, fp16, fp8, int8, 3xtf32 (fp32 as 3xTF32); None: unknown


NONE = Engine("none", False, None, None)
DIRECT = Engine("direct", False, None, None)
TENSOR_ACTIVE_MIN = 5.0  # % Tensor Active inside a kernel's executions from which it runs on tensor cores
CUDA_ACTIVE_MAX = 1.0  # ... and below which it does not

_HELPER = re.compile(
    r"splitkreduce|reducesplitk|reduce_wgrad|init_device_workspace|compute\w*offsets|epilogue::impl|"
    r"xmma_pooling|compute_dot_do_o|convert_dq|nchwtonhwc|nhwctonchw|scal_kernel|finalize_matmul|"
    r"unpack_cudnn|reshape_and_cache"
)
_DIRECT = re.compile(r"grouped_direct|depthwise|dwconv|conv_depthwise")
_XMMA = re.compile(r"xmma_")
_NVJET = re.compile(r"nvjet_(?:sm\d+_)?([a-z]+)_")
_WGMMA = re.compile(r"wgmma|tcgen05|\bumma|_utcmma")
_TENSOROP = re.compile(
    r"(?<![a-z])tensorop|mmatensorop|wmma|hmma|imma|dmma|[hsdi](?:884|1688|16816|161616|8816|16832)(?:gemm|cudnn|conv|fprop|dgrad|wgrad)"
)
_SM90 = re.compile(r"(?:gemm|bmm|matmul).*sm_?(?:90|100|103|120)|cutlass3x_sm(?:90|100)|sm(?:90|100)_gemm")
_ATTENTION = re.compile(r"flash_(?:fwd|bwd|attn)|flash::|fmha|attention|sdpa|xformers")
_FMHA_SIMT = re.compile(r"fmha_cutlass[fb]_f32\w*_sm(?:50|70|75)\b")
_FMHA_3XTF32 = re.compile(r"fmha_cutlass[fb]_f32")
_TENSILE = re.compile(r"^cijk_")
_MFMA = re.compile(r"_mi\d+x\d+x\d+|gtcx|xdl|_mfma")
_AMD = re.compile(r"^cijk_|igemm_(?:fwd|bwd|wrw)_gtc|ck(?:::|\d*)tensor_operation|ck_tile")
# Inductor's pointwise and reduction kernels (triton_poi_/per_/red_) can carry "addmm" in their names (the
# bias and activation of a decomposed addmm): no matrix product; its GEMM templates are triton_tem_.
_TRITON_DOT = re.compile(r"_matmul_ogs_|^triton_(?:tem|mm|bmm)|^triton_(?!poi_|per_|red_)\w*_(?:mm|bmm|addmm)_")
_SIMT = re.compile(
    r"simt|ffma|sgemm|dgemm|hgemm|gemv|gemmsn_|gemmk1_|scudnn|convolve_sgemm|wgrad_alg\d|dgrad_engine|"
    r"winograd|fft"
)
_UNKNOWN = re.compile(r"(?<![a-z])gemm|matmul")
_NVJET_TYPES = {"t": "bf16", "h": "fp16", "q": "fp8", "e": "fp8", "s": "tf32", "d": "fp64", "i": "int8"}


@lru_cache(maxsize=65536)
def classify(name: str) -> Engine:
    """The engine of a kernel of this name (see the module for the rules)."""
    text = name.lower()
    if _HELPER.search(text):
        return NONE
    if _DIRECT.search(text):
        return DIRECT
    for rule in _RULES:
        found = rule(text)
        if found is not None:
            return found
    return NONE


def by_metric(found: Engine, tensor_active_pct: float | None) -> Engine:
    """A matrix kernel whose engine the name does not tell, decided by Tensor Active inside its executions."""
    if not found.matrix or found.engine is not None or tensor_active_pct is None:
        return found
    if tensor_active_pct >= TENSOR_ACTIVE_MIN:
        return Engine("tensor_active", True, "tensor", found.dtype)
    if tensor_active_pct < CUDA_ACTIVE_MAX:
        return Engine("tensor_active", True, "cuda", found.dtype)
    return found


def dtype_of(text: str) -> str | None:
    """The narrowest type a (lower-cased) kernel name names, where it names one."""
    if re.search(r"e4m3|e5m2|e2m1|fp8|mxf\d", text):
        return "fp8"
    if re.search(r"bf16|bfloat16", text):
        return "bf16"
    if "tf32" in text or "tfloat32" in text:
        return "tf32"
    if re.search(r"(?<!b)f16|fp16|half", text):
        return "fp16"
    if re.search(r"f64|fp64|double|dgemm", text):
        return "fp64"
    if re.search(r"int8|\bi8\b|_i8_|i8816|i16832", text):
        return "int8"
    if re.search(r"f32|fp32|float|sgemm|scudnn", text):
        return "fp32"
    return None


def _xmma(text: str) -> Engine | None:
    if not _XMMA.search(text):
        return None
    if "ffma" in text:
        return Engine("xmma", True, "cuda", dtype_of(text) or "fp32")
    dtype = dtype_of(text)
    tensor = re.search(r"_tensor\d+x\d+|warpgroupsize|wgmma|hmma", text) or dtype not in (None, "fp32", "fp64")
    return Engine("xmma", True, "tensor" if tensor else "cuda", dtype)


def _nvjet(text: str) -> Engine | None:
    m = _NVJET.search(text)
    if m is None:
        return None
    return Engine("nvjet", True, "tensor", _NVJET_TYPES.get(m.group(1)[0]))


def _wgmma(text: str) -> Engine | None:
    return Engine("wgmma", True, "tensor", dtype_of(text)) if _WGMMA.search(text) else None


def _tensorop(text: str) -> Engine | None:
    if not _TENSOROP.search(text):
        return None
    dtype = dtype_of(text)
    if dtype in (None, "fp32"):
        shape = re.search(r"([hsdi])(?:884|1688|16816|161616|8816|16832)", text)
        dtype = {"h": "fp16", "d": "fp64", "i": "int8"}.get(shape.group(1), "tf32") if shape else dtype
    return Engine("tensorop", True, "tensor", dtype)


def _sm90(text: str) -> Engine | None:
    return Engine("sm90+", True, "tensor", dtype_of(text)) if _SM90.search(text) and "simt" not in text else None


def _attention(text: str) -> Engine | None:
    if not _ATTENTION.search(text):
        return None
    if _FMHA_SIMT.search(text):
        return Engine("attention", True, "cuda", "fp32")
    dtype = "3xtf32" if _FMHA_3XTF32.search(text) else dtype_of(text)
    return Engine("attention", True, "tensor", dtype if dtype != "fp32" else None)


def _amd(text: str) -> Engine | None:
    if not _AMD.search(text):
        return None
    if "rmsnorm" in text or "layernorm" in text:
        return NONE
    tensile = re.match(r"cijk_a\w+?_b\w+?_([a-z0-9]+)_", text) if _TENSILE.search(text) else None
    dtype = {"b": "bf16", "h": "fp16", "s": "fp32", "d": "fp64"}.get(tensile.group(1)[0]) if tensile else dtype_of(text)
    return Engine("amd", True, "tensor" if _MFMA.search(text) else "cuda", dtype)


def _triton(text: str) -> Engine | None:
    """Triton's matrix products (Inductor's GEMM templates, triton_kernels' matmul_ogs): ``tl.dot`` runs
    16- and 8-bit types on tensor cores; fp32 on them or not as TF32 is allowed, which the name does not say."""
    if not _TRITON_DOT.search(text):
        return None
    dtype = dtype_of(text)
    return Engine("triton", True, "tensor" if dtype in ("bf16", "fp16", "fp8") else None, dtype)


def _simt(text: str) -> Engine | None:
    return Engine("simt", True, "cuda", dtype_of(text) or "fp32") if _SIMT.search(text) else None


def _unknown(text: str) -> Engine | None:
    return Engine("unknown", True, None, dtype_of(text)) if _UNKNOWN.search(text) else None


_RULES = (_xmma, _nvjet, _wgmma, _tensorop, _sm90, _attention, _amd, _triton, _simt, _unknown)
