"""The order the replay (:mod:`.replay`) runs the GPU rows in, worked out once per graph, and the
arithmetic that runs a stream's rows in that order.

The replay goes segment by segment (the calls up to the next one that waits), and in a segment
stream by stream (a *group*: one segment's rows on one lane, in the order they ran). On a stream,
``start = max(ready, previous end + gap)``; with ``T`` the running sum of ``gap + dur`` along the
lane (over all its groups), every row's end is ``T_j + max_{k <= j} (ready_k + dur_k - T_k)``. A
group moves its lane's running maximum by one number, so the replay's loop over segments costs a
few scalar operations a group, and every row's times come from one pass over the lanes after it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from traceconv.analyses import intervals as I
from traceconv.analyses.whatif.graph import Graph


@dataclass(frozen=True)
class Schedule:
    """The rows the replay runs (those launched by, or started before, some call), in its order."""

    bounds: list[int]  # each segment's last call
    wait_of: list[int]  # per segment: the index into the waits of its last call (-1: it does not wait)
    seg_of_call: I.I64  # per call: its segment
    rows: I.I64  # the rows, by segment, lane, then start (ties: launching call, row)
    seg: I.I64  # per position in ``rows``: its segment
    lane: I.I64  # per position in ``rows``: its lane
    group: I.I64  # each group's first position in ``rows``, and len(rows) last
    group_lane: list[int]
    seg_groups: list[int]  # each segment's first group, and the number of groups last
    by_lane: I.I64  # positions in ``rows``, each lane's in the order they run, lane after lane
    lane_starts: I.I64  # where each lane's run starts in ``by_lane``, and len(rows) last
    special: I.Bools  # per group: it holds a row that waits for a collective, or one waited for
    waited: I.I64  # positions (in ``rows``) of the rows that others wait for


def schedule(g: Graph, waits: I.I64, dep: I.I64) -> Schedule:
    """The segments (ending at each waiting call and before each call whose row waits for a
    collective, so that the collective is replayed first) and the rows in each, stream by stream."""
    c, r = g.calls, g.gpu
    n = len(c.start)
    held = r.call[(dep >= 0) & (r.call > 0)] - 1
    bounds = np.array(sorted({*waits.tolist(), *held.tolist(), n - 1}), np.int64)
    key = np.where(r.call >= 0, r.call, np.searchsorted(c.start, r.start))  # rows with no call: the next call's
    rows = np.flatnonzero(key < n)
    rows = rows[np.argsort(key[rows], kind="stable")]
    rows = rows[np.argsort(r.start[rows], kind="stable")]  # by start, ties by call then row
    seg = np.searchsorted(bounds, key[rows])
    lane = r.lane[rows]
    order = np.lexsort((lane, seg))  # stable: each group keeps the order by start
    rows, seg, lane = rows[order], seg[order], lane[order]
    heads = np.flatnonzero(np.r_[True, (seg[1:] != seg[:-1]) | (lane[1:] != lane[:-1])]) if len(rows) else rows
    by_lane = np.argsort(lane, kind="stable")
    lanes_at = np.flatnonzero(np.r_[True, lane[by_lane][1:] != lane[by_lane][:-1]]) if len(rows) else rows
    waited_rows = np.isin(r.row, g.waited)
    marked = (dep[rows] >= 0) | waited_rows[rows]
    special = np.add.reduceat(marked.astype(np.int64), heads) > 0 if len(rows) else np.zeros(0, np.bool_)
    wait_at = {int(w): k for k, w in enumerate(waits)}
    return Schedule(
        bounds=bounds.tolist(),
        wait_of=[wait_at.get(int(b), -1) for b in bounds],
        seg_of_call=np.searchsorted(bounds, np.arange(n)).astype(np.int32),
        rows=rows,
        seg=seg,
        lane=lane,
        group=np.r_[heads, len(rows)].astype(np.int64),
        group_lane=lane[heads].tolist(),
        seg_groups=np.searchsorted(seg[heads], np.arange(len(bounds) + 1)).tolist(),
        by_lane=by_lane,
        lane_starts=np.r_[lanes_at, len(rows)].astype(np.int64),
        special=special,
        waited=np.flatnonzero(waited_rows[rows]),
    )


def along_lanes(s: Schedule, values: I.I64) -> I.I64:
    """The running sum of ``values`` (per position in ``s.rows``) along each lane."""
    sorted_ = np.cumsum(values[s.by_lane])
    at = s.lane_starts[:-1]
    before = np.repeat(sorted_[at] - values[s.by_lane][at], np.diff(s.lane_starts))
    out = np.empty_like(values)
    out[s.by_lane] = sorted_ - before
    return out


def lane_maximum(s: Schedule, values: I.I64, initial: I.I64) -> I.I64:
    """The running maximum of ``values`` (per position in ``s.rows``) along each lane, from the
    lane's ``initial`` value."""
    ordered = values[s.by_lane]
    for lo, hi in zip(s.lane_starts[:-1].tolist(), s.lane_starts[1:].tolist(), strict=True):
        ordered[lo] = max(ordered[lo], initial[s.lane[s.by_lane[lo]]])
        np.maximum.accumulate(ordered[lo:hi], out=ordered[lo:hi])
    out = np.empty_like(values)
    out[s.by_lane] = ordered
    return out


def group_max(s: Schedule, values: I.I64) -> list[int]:
    """The largest of ``values`` in each group."""
    if not len(values):
        return []
    out: list[int] = np.maximum.reduceat(values, s.group[:-1]).tolist()
    return out
