"""Properly nested slices on every track: each slice on the first lane where it nests.

Perfetto (like Chrome's viewer) pairs the begin and end of slices on a track as a stack: a
slice that starts inside another and ends after it cannot be drawn there, and is dropped or
mis-drawn. Here the slices of a track, in order of start (longest first on a tie), each go on
the first lane whose open slices it nests in: lane 0 is the track itself, every further lane a
child track. Overlapping kernels of one stream (or ranges that cross) thus stay visible, and
slices that do nest stay together on lane 0.

The sweep also gives the order the begin and end events are written in: on each lane, by time,
an end before a begin at the same time, inner slices closing first. Its state (the open slices
of each lane) is carried from one time bucket to the next. Most tracks nest as they are (a
stream's kernels one after another, a thread's operators inside each other): for them the
order is found with one sort and checked (:func:`_laminar`); a track whose slices cross is
swept slice by slice.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

BEGIN, END, INSTANT_EVENT = 1, 2, 3  # Perfetto TrackEvent types
Array = np.ndarray[Any, Any]


@dataclass
class Events:
    """A track's events in the order they are written: ``record`` indexes the sorted records
    (-1 for ends), ``ts`` the time, ``lane`` the lane, ``type`` BEGIN, END or INSTANT_EVENT."""

    record: Array
    ts: Array
    lane: Array
    type: Array

    @staticmethod
    def of(record: Sequence[int], ts: Sequence[int], lane: Sequence[int], kind: Sequence[int]) -> Events:
        return Events(
            np.asarray(record, np.int64),
            np.asarray(ts, np.int64),
            np.asarray(lane, np.int64),
            np.asarray(kind, np.uint8),
        )


def joined(parts: list[Events]) -> Events:
    return Events(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("record", "ts", "lane", "type")))


@dataclass
class Sweep:
    """One track's lanes, each a stack of the end times of its open slices (innermost last)."""

    stacks: list[list[int]] = field(default_factory=lambda: [[]])

    def run(self, start: Array, end: Array, instant: Array, bound: int | None) -> Events:
        """The events of the next records of this track (sorted by start, then longest first).

        ``bound``: no later record of this track starts before it (None: none follows); an end
        after it is held back, as a later slice may start inside.
        """
        if not len(start):
            return Events.of([], [], [], [])
        closed = self._close_before(int(start[0]))
        if not any(self.stacks[1:]):
            found = _laminar(self.stacks[0], start, end, instant)
            if found is not None:
                events, held = _hold_back(found, bound)
                self.stacks = [held]
                return joined([closed, events])
        return joined([closed, self._nest(start.tolist(), end.tolist(), instant.tolist())])

    def close(self) -> Events:
        """The ends of every slice still open (after the last bucket)."""
        return self._close_before(None)

    def _close_before(self, t: int | None) -> Events:
        """The ends, on every lane, of the open slices that end by ``t`` (the next start; None: all)."""
        ts, lane = array("q"), array("q")
        for level, stack in enumerate(self.stacks):
            while stack and (t is None or stack[-1] <= t):
                ts.append(stack.pop())
                lane.append(level)
        return Events.of([-1] * len(ts), ts, lane, [END] * len(ts))

    def _nest(self, start: list[int], end: list[int], instant: list[bool]) -> Events:
        # typed arrays, not lists: 8 bytes an item instead of a pointer and an int object
        record, ts, lane, kind = array("q"), array("q"), array("q"), array("B")
        stacks = self.stacks

        def write(index: int, time: int, level: int, what: int) -> None:
            record.append(index)
            ts.append(time)
            lane.append(level)
            kind.append(what)

        for i, (s, e, point) in enumerate(zip(start, end, instant, strict=True)):
            level = 0
            for level, stack in enumerate(stacks):
                while stack and stack[-1] <= s:
                    write(-1, stack.pop(), level, END)
                if point or not stack or stack[-1] >= e:
                    break
            else:
                level = len(stacks)
                stacks.append([])
            if point:
                write(i, s, level, INSTANT_EVENT)
            else:
                write(i, s, level, BEGIN)
                stacks[level].append(e)
        return Events.of(record, ts, lane, kind)


def _laminar(open_ends: list[int], start: Array, end: Array, instant: Array) -> Events | None:
    """Lane 0's events when the slices (after those still open, ``open_ends``, outermost first)
    nest as they are; None when some cross.

    The order: by time; at one time, ends before begins, inner ends first (the later begun),
    begins in record order, and a slice of no length ends right after it begins. It is the
    stack's order exactly when every end closes the level its begin opened: an end that
    closed another slice would find its own at another level, as two open slices never share one.
    """
    k, n = len(open_ends), len(start)
    s = np.concatenate([np.full(k, -1, np.int64), start])
    e = np.concatenate([np.asarray(open_ends, np.int64), end])
    point = np.concatenate([np.zeros(k, bool), instant])
    index = np.arange(k + n)
    ranged = np.flatnonzero(~point)
    empty = e[ranged] == s[ranged]
    time = np.concatenate([s, e[ranged]])
    klass = np.concatenate([np.ones(k + n), np.where(empty, 1.0, 0.0)])
    tie = np.concatenate([index.astype(np.float64), np.where(empty, ranged + 0.5, -ranged.astype(np.float64))])
    who = np.concatenate([index, ranged])
    is_end = np.concatenate([np.zeros(k + n, bool), np.ones(len(ranged), bool)])
    order = np.lexsort((tie, klass, time))
    ends, rec = is_end[order], who[order]
    step = np.where(ends, -1, np.where(point[rec] & ~ends, 0, 1))
    depth = np.cumsum(step)
    level = np.where(ends, depth + 1, depth)
    opened = np.zeros(k + n, np.int64)
    opened[rec[~ends]] = level[~ends]
    if np.any(level[ends] != opened[rec[ends]]):
        return None
    keep = ends | (rec >= k)  # the begins of the slices still open were written before
    kind = np.where(ends, END, np.where(point[rec], INSTANT_EVENT, BEGIN))[keep]
    ts = np.where(ends, e[rec], s[rec])[keep]
    record = np.where(ends, -1, rec - k)[keep]
    return Events(record, ts, np.zeros(len(ts), np.int64), kind.astype(np.uint8))


def _hold_back(events: Events, bound: int | None) -> tuple[Events, list[int]]:
    """``events`` without the ends after ``bound`` (a suffix: every begin is before it), and
    those ends as the open stack (outermost first)."""
    if bound is None:
        return events, []
    late = int(np.count_nonzero((events.type == END) & (events.ts > bound)))
    if not late:
        return events, []
    cut = len(events.ts) - late
    head = Events(events.record[:cut], events.ts[:cut], events.lane[:cut], events.type[:cut])
    return head, events.ts[cut:][::-1].tolist()
