"""The critical path of each step, as a breakdown of its time that sums to it.

At every instant of a step's window, either a GPU runs work, and the step waits for the GPU
(compute, copies or communication, in that order where they overlap), or the GPU is idle and the
step waits for whatever kept it idle: the idle gap is charged to what happened when the GPU ran
out of work (:mod:`traceconv.analyses.summary.timeline.gaps`): a sync the host was blocked in,
launch overhead (a short gap while the host dispatched and launched the next work), the host's
own work (a long gap, in an operator or not), or a dependency of the GPU's own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from traceconv.analyses import intervals as I
from traceconv.analyses.results import PATH_PARTS

PARTS = PATH_PARTS
LONG_GAP_NS = 200_000  # as the summary's launch_gap_us: a shorter idle gap is launch overhead


@dataclass(frozen=True)
class Spans:
    """What the path is read from, in a window of time: the GPU rows (by class: 0 compute, 1 copy,
    2 communication), their queued spans, the host's waits (all three: those that reach into the
    window), its operators (sorted, disjoint unions), and the first start of a GPU row at or after
    the window's end (None: none)."""

    gpu: tuple[I.I64, I.I64, I.I64]  # start, end, class
    queued: tuple[I.I64, I.I64]
    waits: tuple[I.I64, I.I64]
    ops: tuple[I.I64, I.I64]
    after: int | None = None


def per_step(
    spans_of: Callable[[int, int], Spans], starts: I.I64, ends: I.I64, batch: int, long_gap_ns: int = LONG_GAP_NS
) -> np.ndarray:
    """Each step's time by part (a row per step, a column per :data:`PARTS`, ns), summing to the step;
    read ``batch`` steps at a time from ``spans_of(start, end)``, the spans of a window of time."""
    out = np.zeros((len(starts), len(PARTS)), np.int64)
    ops = np.zeros(len(starts), np.float64)  # of the host gaps, the time inside operators
    for k0 in range(0, len(starts), max(batch, 1)):
        k1 = min(k0 + max(batch, 1), len(starts))
        t0, t1 = int(starts[k0]), int(starts[k1]) if k1 < len(starts) else int(ends[-1])
        spans = spans_of(t0, t1)
        busy = _busy(spans, starts[k0:k1], ends[k0:k1], out[k0:k1])
        _gaps(spans, busy, (t0, t1, k0 == 0), starts, ends, long_gap_ns, out, ops)
    moved = np.rint(ops).astype(np.int64)
    out[:, 5] += moved
    out[:, 6] -= moved
    return out


def _busy(spans: Spans, starts: I.I64, ends: I.I64, out: np.ndarray) -> tuple[I.I64, I.I64]:
    """The GPU's parts of each step (``out``'s rows), and when the GPU was busy."""
    s, e, klass = spans.gpu
    unions = [I.union(s[klass == k], e[klass == k]) for k in range(3)]
    covered = [unions[0]]
    for k in (2, 1):  # compute, then communication, then copies: each counts where the ones before do not
        covered.append(
            I.union(np.concatenate([covered[-1][0], unions[k][0]]), np.concatenate([covered[-1][1], unions[k][1]]))
        )
    below = [_in_windows(u, starts, ends) for u in covered]
    out[:, 0] = below[0]
    out[:, 2] = below[1] - below[0]
    out[:, 1] = below[2] - below[1]
    return covered[-1]


def _in_windows(segs: tuple[I.I64, I.I64], starts: I.I64, ends: I.I64) -> I.I64:
    return I.covered_below(*segs, ends) - I.covered_below(*segs, starts)


def _gaps(
    spans: Spans,
    busy: tuple[I.I64, I.I64],
    window: tuple[int, int, bool],
    starts: I.I64,
    ends: I.I64,
    long_gap_ns: int,
    out: np.ndarray,
    ops: np.ndarray,
) -> None:
    """The idle gaps that begin in ``window`` (of the steps' time; True: the first), each charged to what happened at
    its start, split among the steps they cross (``out``; ``ops``: the host's time in operators)."""
    a, b = _idle(busy, window, spans.after, int(starts[0]), int(ends[-1]))
    if not len(a):
        return
    queued = _inside(a, spans.queued)
    waiting = _inside(a, spans.waits)
    short = (b - a) < long_gap_ns
    in_ops = _in_windows(spans.ops, a, b)
    # part per gap: sync wait, GPU wait, launch (short), else the host: in operators or not (split by time)
    kinds = np.select([waiting, queued & ~waiting, short], [3, 7, 4], default=6)
    for k in (3, 4, 7):
        _charge(a, b, kinds == k, starts, ends, out[:, k])
    host = kinds == 6
    _charge(a, b, host, starts, ends, out[:, 6])
    # of the host gaps, the part inside operators goes to host_ops, in proportion in each step
    share = np.where(b - a > 0, in_ops / np.maximum(b - a, 1), 0.0)
    for i in np.flatnonzero(host):
        lo_i, hi_i = np.searchsorted(ends, a[i], "right"), np.searchsorted(starts, b[i], "left")
        for k in range(lo_i, min(hi_i, len(starts))):
            ops[k] += share[i] * max(0, min(b[i], ends[k]) - max(a[i], starts[k]))


def _idle(
    busy: tuple[I.I64, I.I64], window: tuple[int, int, bool], after: int | None, lo: int, hi: int
) -> tuple[I.I64, I.I64]:
    """The idle gaps between the busy segments, within the steps' time ``[lo, hi)``, that begin in
    ``window``: each from a segment's end to the next one's start (the first window: from ``lo``;
    the last gap: to ``after``, the next busy start past the window, or ``hi``)."""
    bs, be = busy
    t0, t1, first = window
    a = np.concatenate((np.array([lo] if first else [], np.int64), be))
    last = np.array([after if after is not None else hi] if first or len(be) else [], np.int64)
    b = np.concatenate((bs if first else bs[1:], last))
    keep = (b > a) & (b > lo) & (a < hi)
    a, b = np.maximum(a[keep], lo), np.minimum(b[keep], hi)
    mine = (a >= t0) & (a < t1)
    return a[mine], b[mine]


def _inside(points: I.I64, segs: tuple[I.I64, I.I64]) -> I.Bools:
    s, e = segs
    if not len(s):
        return np.zeros(len(points), np.bool_)
    at = np.searchsorted(s, points, side="right") - 1
    return (at >= 0) & (points < e[np.maximum(at, 0)])


def _charge(a: I.I64, b: I.I64, mask: I.Bools, starts: I.I64, ends: I.I64, into: I.I64) -> None:
    """Adds the time of the gaps ``[a, b)`` (those of ``mask``) inside each step's window."""
    if not mask.any():
        return
    segs = (a[mask], b[mask])
    into += _in_windows(segs, starts, ends)
