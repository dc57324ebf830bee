"""How names are shown where space is short: one rule for kernels, everywhere (JSON keeps names whole)."""

from __future__ import annotations

import re

_NOISE = re.compile(r"^void |at::native::|at::cuda::|\(anonymous namespace\)::|cutlass::|<unnamed>::")


def kernel_label(name: str) -> str:
    """A kernel's name for a narrow column: no ``void``, common namespaces or parameter list."""
    text = _NOISE.sub("", name)
    depth = 0
    for i, ch in enumerate(text):  # cut the parameter list: the first "(" outside template brackets
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "(" and depth == 0 and i > 0:
            return text[:i]
    return text


def shorten(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, the last one an ellipsis."""
    return text if len(text) <= width else text[: width - 1] + "…"
