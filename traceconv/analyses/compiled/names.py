"""What an Inductor kernel's name says: the kind of kernel and the aten operations it fuses.

Inductor names a Triton kernel ``triton_<kind>_fused_<ops>_<n>``: ``<kind>`` is ``poi``
(pointwise), ``red`` (reduction), ``per`` (persistent reduction), ``tem`` (a template, e.g. a
GEMM), ``for`` (foreach) ...; ``<ops>`` the names of the aten operations it was made from (their
overload packets, sorted: ``config.triton.descriptive_names = "original_aten"``, the default)
joined by ``_``; ``<n>`` a number that makes the name unique. The aten names have underscores
of their own (``native_layer_norm``, ``_to_copy``), so the words are split greedily: at each word,
the longest run of words that is a name in :data:`ATEN_OPS` is one operation, else the word alone
is; a ``backward`` left alone ends the operation before it (``gelu_backward``), and an empty word
(a name's leading ``_``) starts the next one (``_foo``). Names made with other
``descriptive_names`` settings split the same way, into the words they hold.
"""

from __future__ import annotations

import re

# aten operations whose names hold an underscore, as Inductor writes them into kernel names (the
# overload packet's name); every other operation is one word (add, mul, gelu, view, clone ...).
ATEN_OPS = frozenset(
    {
        *("_to_copy", "_unsafe_view", "_softmax", "_log_softmax", "_softmax_backward_data"),
        *("_log_softmax_backward_data", "_reshape_alias", "_foreach_add", "_foreach_mul", "_foreach_div"),
        *("_foreach_sqrt", "_foreach_addcmul", "_foreach_addcdiv", "_foreach_lerp", "_foreach_copy"),
        *("_fused_adam", "_fused_adamw", "_scaled_mm", "_scaled_dot_product_efficient_attention"),
        *("_scaled_dot_product_flash_attention", "_scaled_dot_product_cudnn_attention", "_efficient_attention"),
        *("_flash_attention_forward", "_flash_attention_backward", "_adaptive_avg_pool2d", "_pdist_forward"),
        *("native_layer_norm", "native_layer_norm_backward", "native_batch_norm", "native_batch_norm_backward"),
        *("native_group_norm", "native_group_norm_backward", "native_dropout", "native_dropout_backward"),
        *("layer_norm", "group_norm", "batch_norm", "rms_norm", "_fused_rms_norm", "_fused_rms_norm_backward"),
        *("embedding_dense_backward", "embedding_backward", "embedding_bag", "_embedding_bag"),
        *("threshold_backward", "gelu_backward", "silu_backward", "sigmoid_backward", "tanh_backward"),
        *("hardswish_backward", "hardsigmoid_backward", "leaky_relu", "leaky_relu_backward", "elu_backward"),
        *("softplus_backward", "mish_backward", "select_backward", "slice_backward", "index_select"),
        *("index_put", "index_add", "index_copy", "index_fill", "masked_fill", "masked_scatter", "scatter_add"),
        *("scatter_reduce", "gather_backward", "nll_loss_forward", "nll_loss_backward", "nll_loss2d_forward"),
        *("nll_loss2d_backward", "cross_entropy_loss", "mse_loss", "mse_loss_backward", "binary_cross_entropy"),
        *("smooth_l1_loss", "avg_pool2d", "avg_pool2d_backward", "max_pool2d_with_indices"),
        *("max_pool2d_with_indices_backward", "upsample_nearest2d", "upsample_bilinear2d"),
        *("constant_pad_nd", "reflection_pad2d", "replication_pad2d", "as_strided", "as_strided_scatter"),
        *("slice_scatter", "select_scatter", "diagonal_scatter", "new_zeros", "new_ones", "new_empty"),
        *("new_empty_strided", "empty_strided", "full_like", "zeros_like", "ones_like", "empty_like"),
        *("scalar_tensor", "bitwise_and", "bitwise_or", "bitwise_not", "bitwise_xor", "logical_and"),
        *("logical_or", "logical_not", "floor_divide", "true_divide", "var_mean", "amax", "log_softmax"),
        *("convolution_backward", "cudnn_convolution", "upsample_nearest2d_backward", "grid_sampler_2d"),
        *("rsub", "_assert_async", "_local_scalar_dense", "lift_fresh", "split_with_sizes", "unbind"),
    }
)
KINDS = {"poi": "pointwise", "red": "reduction", "per": "persistent reduction", "tem": "template", "for": "foreach"}
# an Inductor kernel: triton_<kind>_fused_<ops>_<n> (the ops part absent in unfused names)
_NAME = re.compile(r"^triton_(?P<kind>[a-z]+)_(?:fused_(?P<ops>.+?)|(?P<plain>.+?))_(?P<n>\d+)$")
_LONGEST = max(len(op.split("_")) for op in ATEN_OPS)
_WORDS = {tuple(op.split("_")) for op in ATEN_OPS}


def is_triton(name: str) -> bool:
    """Whether a kernel is one Inductor generated (``triton_...``)."""
    return name.startswith("triton_")


def kernel_kind(name: str) -> str | None:
    """``pointwise``, ``reduction``, ``persistent reduction``, ``template``, ``foreach`` (or the
    abbreviation as written) for an Inductor kernel; None for any other kernel."""
    m = _NAME.match(name)
    if m is None:
        return None
    return KINDS.get(m["kind"], m["kind"])


def fused_ops(name: str) -> list[str]:
    """The aten operations an Inductor kernel fuses, in the order its name gives them
    (``triton_poi_fused_add_mul_0`` -> ``["add", "mul"]``); ``[]`` for any other kernel."""
    m = _NAME.match(name)
    if m is None or m["ops"] is None:
        return []
    return split_ops(m["ops"])


def split_ops(joined: str) -> list[str]:
    """``_``-joined aten names split greedily against :data:`ATEN_OPS` (see the module)."""
    words = joined.split("_")
    out: list[str] = []
    i = 0
    while i < len(words):
        j = _longest_at(words, i)
        if j > i:
            out.append("_".join(words[i:j]))
            i = j
        elif words[i] == "backward" and out:
            out[-1] += "_backward"
            i += 1
        elif words[i] == "" and i + 1 < len(words):
            out.append("_" + words[i + 1])
            i += 2
        else:
            if words[i]:
                out.append(words[i])
            i += 1
    return out


def _longest_at(words: list[str], i: int) -> int:
    """The end of the longest run of words from ``i`` that is a name in :data:`ATEN_OPS` (``i``: none)."""
    for j in range(min(len(words), i + _LONGEST), i + 1, -1):
        if tuple(words[i:j]) in _WORDS:
            return j
    return i if (words[i],) not in _WORDS else i + 1


# Operator families: what an eager operator and a compiled kernel's operations are lined up by.
_MATMUL = frozenset({"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "addmv", "mv", "scaled_mm"})


_SAME = {"to_copy": "copy"}  # a dtype conversion: eager's kernels run in aten::copy_, Inductor names _to_copy


def family(op: str) -> str:
    """The family of an aten operation, as an eager run and a compiled one both name it: the name
    without ``aten::``, a leading ``_`` or ``native_``, or an in-place variant's trailing ``_``
    (``native_layer_norm`` -> ``layer_norm``, ``add_`` -> ``add``); the GEMMs are one family, ``mm``;
    ``_to_copy`` and ``copy_`` are ``copy``; ``_backward`` is kept."""
    name = op.removeprefix("aten::").lstrip("_").removeprefix("native_").rstrip("_")
    return "mm" if name in _MATMUL else _SAME.get(name, name)
