"""Vectorised interval arithmetic: unions, overlaps, windows, and the nesting of ranges on a thread.

Times are int64 nanoseconds. Every function works on whole arrays; loops run over nesting
levels or groups, never over rows.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from traceconv.readers.enclosing import Innermost, Points

I64 = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]


def union(start: I64, end: I64) -> tuple[I64, I64]:
    """The union of ``[start, end)`` intervals as sorted, disjoint segments (touching ones merge)."""
    if len(start) == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    order = np.argsort(start, kind="stable")
    s, e = start[order], np.maximum(end[order], start[order])
    reach = np.maximum.accumulate(e)
    first = np.r_[True, s[1:] > reach[:-1]]
    heads = np.flatnonzero(first)
    seg_end = reach[np.r_[heads[1:] - 1, len(s) - 1]]
    return s[heads], seg_end


def length(start: I64, end: I64) -> int:
    """Total time covered by the union of the intervals."""
    s, e = union(start, end)
    return int((e - s).sum())


def overlap(a: tuple[I64, I64], b: tuple[I64, I64]) -> int:
    """Time covered by both unions: |A| + |B| - |A u B|."""
    both = (np.concatenate([a[0], b[0]]), np.concatenate([a[1], b[1]]))
    return length(*a) + length(*b) - length(*both)


def overlap3(a: tuple[I64, I64], b: tuple[I64, I64], c: tuple[I64, I64]) -> int:
    """Time covered by all three unions (inclusion-exclusion)."""
    abc = (np.concatenate([a[0], b[0], c[0]]), np.concatenate([a[1], b[1], c[1]]))
    singles = length(*a) + length(*b) + length(*c)
    return length(*abc) - singles + overlap(a, b) + overlap(a, c) + overlap(b, c)


def disjoint(start: I64, end: I64) -> bool:
    """Whether intervals sorted by start follow one another without overlap (they may touch)."""
    return bool((start[1:] >= end[:-1]).all() and (np.diff(start) >= 0).all())


def running_total(seg_start: I64, seg_end: I64) -> I64:
    """The segments' time before each of them, and in all of them (the last): :func:`covered_below`'s."""
    before: I64 = np.concatenate(([0], np.cumsum(seg_end - seg_start)))
    return before


def covered_below(seg_start: I64, seg_end: I64, times: I64, before: I64 | None = None) -> I64:
    """For each time, how much of the sorted, disjoint segments lies before it (a running total;
    ``before``: :func:`running_total` of the segments, where the caller has it already)."""
    if len(seg_start) == 0:
        return np.zeros(len(times), np.int64)
    if len(seg_start) == 1 and seg_end[0] >= seg_start[0]:  # one window (a scope without steps): no search
        one: I64 = np.clip(times, seg_start[0], seg_end[0]) - seg_start[0]
        return one
    if before is None:
        before = running_total(seg_start, seg_end)
    idx = np.searchsorted(seg_start, times, side="right") - 1
    at = np.maximum(idx, 0)
    partial = np.minimum(times - seg_start[at], seg_end[at] - seg_start[at])
    covered: I64 = np.where(idx >= 0, before[at] + partial, 0)
    return covered


def inside(times: I64, win_start: I64, win_end: I64) -> Bools:
    """Whether each time lies in one of the windows ``[start, end]`` (windows need not be sorted)."""
    s, e = union(win_start, win_end)
    if len(s) == 0:
        return np.zeros(len(times), dtype=bool)
    idx = np.searchsorted(s, times, side="right") - 1
    return (idx >= 0) & (times <= e[np.maximum(idx, 0)])


def parents(group: I64, start: I64, end: I64) -> I64:
    """Index of the innermost range of the same group enclosing each range, or -1 for a root.

    Ranges are ordered by (group, start, longest first); a range's parent is the innermost
    (:mod:`traceconv.readers.enclosing`) of the ranges before it in that order that are still
    open when it starts. Times are doubled so that a zero-length range closes before the next
    one starts; ranges that only touch are siblings. A range that overlaps another without
    nesting in it gets the innermost range open at its start.
    """
    n = len(start)
    result = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return result
    order = _order(group, start, end)
    g, s, e = group[order], start[order], end[order]
    s2, e2 = doubled(int(s.min()), s, e)
    code = np.concatenate([[0], np.cumsum(g[1:] != g[:-1])]).astype(np.int64)
    points = Points(code, s2)  # already in this order: the points' order is the ranges'
    _, hi = points.covered(code, s2, e2, closed=False)
    lo = np.arange(1, n + 1, dtype=np.int64)  # a range covers only the ranges after it
    best = Innermost(n, [np.int64])
    best.offer(points, lo, np.maximum(hi, lo), s2, e2, [np.arange(n, dtype=np.int64)])
    parent = best.values[0]
    ok = parent >= 0
    result[order[ok]] = order[parent[ok]]
    return result


def doubled(base: int, start: I64, end: I64) -> tuple[I64, I64]:
    """Times from ``base``, doubled: a range is ``[s2, e2)`` with ``e2 >= s2 + 1``, so that a
    zero-length range closes before the next one starts (the nesting rule of :func:`parents`)."""
    s2 = (start - base) * 2
    return s2, np.maximum((end - base) * 2, s2 + 1)


def _order(group: I64, start: I64, end: I64) -> I64:
    """The order (group, start, longest first), ties as they come: the rows' own where they are in
    it already (the trees' pass gets them sorted so), without sorting them again."""
    g, s, e = group[1:], start[1:], end[1:]
    pg, ps, pe = group[:-1], start[:-1], end[:-1]
    if bool(np.all((g > pg) | ((g == pg) & ((s > ps) | ((s == ps) & (e <= pe)))))):
        return np.arange(len(group), dtype=np.int64)
    ordered: I64 = np.lexsort((-end, start, group))
    return ordered


def ancestors(parent: I64, first: I64) -> list[tuple[I64, I64]]:
    """Level by level, ``(rows, node)``: each row of ``first`` paired with ``first`` and then its ancestors.

    ``first[i]`` is a node index or -1. Level 0 pairs rows with ``first`` itself.
    """
    rows = np.flatnonzero(first >= 0)
    node = first[rows]
    levels = []
    while len(rows):
        levels.append((rows, node))
        up = parent[node]
        keep = up >= 0
        rows, node = rows[keep], up[keep]
    return levels
