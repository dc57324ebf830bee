"""The innermost enclosing range, one mechanism for every reader and analysis.

Query points ``(group, time)`` (groups are threads) are sorted once (:class:`Points`); each
range finds the run of points it covers with two binary searches, and :class:`Innermost`
keeps, per point, the innermost range offered so far: the one that starts last, then ends
first. Ranges may be offered in batches (the PyTorch reader streams its operators past the
API calls). Of equal ranges in one offer the last wins; a later offer replaces only a range
it beats. Memory: the points' order and four arrays of per-point state, plus one pair per
(range, covered point) of the batch being offered.

Uses: API calls and GPU work -> the innermost NVTX range (Nsight Systems) or CPU operator
(PyTorch) around the call; ranges -> their parent range (``analyses.intervals.parents``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
Ints = npt.NDArray[np.signedinteger[Any]]
UNSET = np.iinfo(np.int64).min  # the start of "no range yet": any range is more inner
DECIDED = np.iinfo(np.int64).max  # the start of "settled": no range replaces it
_PACKED_LIMIT = 1 << 62  # group * span + time must stay below this in an int64 key


def spans(lo: I64, hi: I64) -> tuple[I64, I64]:
    """Expand ``[lo, hi)`` index runs: (which run, index) for every index covered."""
    counts = np.maximum(hi - lo, 0)
    owner = np.repeat(np.arange(len(lo), dtype=np.int64), counts)
    starts = np.repeat(lo - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
    return owner, starts + np.arange(int(counts.sum()), dtype=np.int64)


class Points:
    """Query points sorted by (group, time), as one int64 key per point.

    ``group``: dense non-negative codes (-1: the point belongs to no group and is never
    covered). When ``groups x time span`` would not fit a key, times are replaced by their
    rank among the points' times, which keeps every comparison a range makes with them.
    """

    def __init__(self, group: Ints, time: Ints, reuse_group: bool = False) -> None:
        """``reuse_group``: ``group`` (int64) may be overwritten (one array less at the peak)."""
        valid = group >= 0
        self.n = len(group)
        self._ranks: I64 | None = None
        t = time.astype(np.int64, copy=False)
        self.t0 = int(t[valid].min()) if valid.any() else 0
        self.span = int(t[valid].max()) - self.t0 + 2 if valid.any() else 1
        groups = int(group.max()) + 1 if self.n else 1
        if groups * self.span >= _PACKED_LIMIT:
            self._ranks = np.unique(t[valid])
            t, self.t0, self.span = np.searchsorted(self._ranks, t), 0, len(self._ranks) + 2
        key = group.astype(np.int64, copy=not reuse_group)
        key *= self.span  # made in place: arrays of every query point can be a reader's peak
        key += t
        key -= self.t0
        if not valid.all():
            key[~valid] = -1
        order = np.argsort(key, kind="stable")
        self.order: Ints = order.astype(np.int32) if self.n < 2**31 else order
        del order
        self.keys = key[self.order]

    def _time(self, t: I64, side: str) -> I64:
        if self._ranks is None:
            return t - self.t0
        at = np.searchsorted(self._ranks, t, side="left" if side == "left" else "right")
        return at if side == "left" else at - 1

    def covered(self, group: Ints, start: I64, end: I64, closed: bool = True) -> tuple[I64, I64]:
        """Per range, the run ``[lo, hi)`` of sorted points it covers: ``start <= time <= end``
        (``closed``) or ``start <= time < end``; a range of group -1 covers none."""
        g = group.astype(np.int64, copy=False)
        s = np.clip(self._time(start, "left"), 0, self.span - 1)
        e = np.clip(self._time(end, "right" if closed else "left"), -1, self.span - 1)
        lo = np.searchsorted(self.keys, g * self.span + s, "left")
        hi = np.searchsorted(self.keys, g * self.span + e, "right" if closed else "left")
        none = g < 0
        return np.where(none, 0, lo), np.where(none, 0, hi)


class Innermost:
    """Per point, the innermost range offered so far and the values (``payload``) it carries."""

    def __init__(self, n: int, payload: Sequence[npt.DTypeLike]) -> None:
        self.start = np.full(n, UNSET, np.int64)
        self.end = np.full(n, -1, np.int64)
        self.values = [np.full(n, -1, dtype) for dtype in payload]

    def offer(
        self, points: Points, lo: I64, hi: I64, start: I64, end: I64, payload: Sequence[Ints], tie: Ints | None = None
    ) -> None:
        """Ranges covering the sorted points ``[lo, hi)`` (from :meth:`Points.covered`)."""
        owner, pos = spans(lo, hi)
        ties = None if tie is None else tie[owner]
        self.improve(points.order[pos], start[owner], end[owner], [v[owner] for v in payload], ties)

    def improve(self, j: Ints, start: I64, end: I64, payload: Sequence[Ints], tie: Ints | None = None) -> None:
        """Candidate ranges for points ``j`` (pairs): keep the innermost per point, if it beats the one held.

        ``tie``: of equal ranges the one with the highest, then the last (several offers made as
        one: a later offer's equal range would not have replaced an earlier one's)."""
        order = np.lexsort((-end, start, j) if tie is None else (tie, -end, start, j))
        j, start, end = j[order], start[order], end[order]
        last = np.flatnonzero(np.append(j[1:] != j[:-1], True)) if len(j) else np.empty(0, np.int64)
        j, start, end = j[last], start[last], end[last]
        better = (start > self.start[j]) | ((start == self.start[j]) & (end < self.end[j]))
        take = order[last][better]
        j = j[better]
        self.start[j], self.end[j] = start[better], end[better]
        for held, values in zip(self.values, payload, strict=True):
            held[j] = values[take]

    def decide(self, j: Ints, payload: Sequence[Ints]) -> None:
        """Settle points ``j`` on these values: no range offered later replaces them."""
        self.start[j] = DECIDED
        for held, values in zip(self.values, payload, strict=True):
            held[j] = values

    def settle_found(self) -> None:
        """Settle every point that has a range: later offers only reach the points still without one."""
        self.start[self.values[0] >= 0] = DECIDED


def innermost_enclosing(range_group: I64, range_start: I64, range_end: I64, query_group: I64, query_time: I64) -> I64:
    """Index of the innermost range of the same group that contains each query time
    (``start <= t <= end``), or -1. Groups are any integers (threads); negative ones match nothing."""
    result = np.full(len(query_group), -1, dtype=np.int64)
    if len(range_group) == 0 or len(query_group) == 0:
        return result
    known = np.unique(query_group[query_group >= 0])
    points = Points(_codes(known, query_group), query_time)
    best = Innermost(len(query_group), [np.int64])
    lo, hi = points.covered(_codes(known, range_group), range_start, range_end)
    best.offer(points, lo, hi, range_start, range_end, [np.arange(len(range_group), dtype=np.int64)])
    return best.values[0]


def _codes(known: I64, groups: I64) -> I64:
    """Each group's index in the sorted ``known`` groups; -1 for a negative or unknown one."""
    if not len(known):
        return np.full(len(groups), -1, dtype=np.int64)
    at = np.minimum(np.searchsorted(known, groups), len(known) - 1)
    return np.where((groups >= 0) & (known[at] == groups), at, -1)
