"""How names are shown where space is short: one rule for kernels, everywhere (JSON keeps names whole)."""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Sequence

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


# Where a cut may start in the middle of a name: after one of these.
_BREAKS = " _:<,./(-"


def fit(texts: Sequence[str], width: int) -> list[str]:
    """Each text in ``width`` characters, distinct texts kept apart where they can be: cut at the end
    (:func:`shorten`) when they differ before the cut, else the middle of what they share is elided,
    keeping the part that differs (``sm80_xmma…tn_n_tilesize128x12…`` beside ``sm80_xmma…nn_n_…``);
    texts that differ in two places and still look alike show both."""
    distinct = sorted(set(texts))
    shared = dict.fromkeys(distinct, 0)
    for a, b in itertools.pairwise(distinct):  # a text shares the most with a neighbour in sorted order
        n = _common(a, b)
        shared[a], shared[b] = max(shared[a], n), max(shared[b], n)
    cut = {t: _cut(t, width, [shared[t]]) for t in distinct}
    alike: dict[str, list[str]] = {}
    for t in distinct:
        alike.setdefault(cut[t], []).append(t)
    for group in (g for g in alike.values() if len(g) > 1):
        for t in group:  # where it parts from the others that look the same, and from its neighbour
            first = max(_common(t, u) for u in group if u != t)
            cut[t] = _cut(t, width, sorted({first, shared[t]}))
    return [cut[t] for t in texts]


def _common(a: str, b: str) -> int:
    return len(os.path.commonprefix([a, b]))  # noqa: RUF071 (characters, not path components)


def _cut(text: str, width: int, points: list[int]) -> str:
    """``text`` in ``width`` characters, showing where it stops sharing its first ``points`` characters
    with others: from the start, then a piece from each point on, ellipses between."""
    if len(text) <= width or points[-1] < width - 1 or width < 12:
        return shorten(text, width)
    points = [p for p in points if p >= 4] or points[-1:]
    head = (width - 2 * len(points)) // (len(points) + 2)
    room = (width - head - len(points)) // len(points)
    out = text[:head]
    for n, point in enumerate(points):
        last = n == len(points) - 1
        size = width - len(out) - 1 if last else room
        start = _start(text, head, point, size)
        if last and start + size >= len(text):  # the end is in reach: as much of it as fits
            return out + "…" + text[max(start, len(text) - size) if n else len(text) - size :]
        out += "…" + text[start : start + size - 1] + ("…" if last else "")
    return out


def _start(text: str, head: int, point: int, size: int) -> int:
    """Where a piece of ``size`` characters that shows the one at ``point`` starts: at the start of its
    word where that leaves the point in the first half of the piece, else just before the point."""
    cut = max(text.rfind(c, head, point + 1) for c in _BREAKS)
    return cut + 1 if cut >= 0 and point - cut <= min(16, size // 2) else max(head, point - min(3, size // 4))
