"""The graph replayed with a change: when each call, GPU row and step would have happened.

Host: call ``i`` moves by the host time the change adds or removes before it (``Change.host``,
its own duration's change ``Change.call``), plus the shift the waits before it caused: a call
that waits for the GPU (a sync, a staged copy) returns when what it waits for has finished in
the replay, ``tail`` after it as in the trace, or after its own overhead when it no longer waits.

GPU: a row starts when both its launch allows (its launching call's start, plus the delay from
that call's start to the row's start where the launch bound it) and its stream allows (the end
of the row before it on its stream, plus the gap between them where the stream bound it). Each
row keeps, of the trace, the constraint that bound it; the other is taken at its usual value.
Replayed with no change, every time is the trace's own: the replay's errors are only those of
the change. Rows are replayed segment by segment between the calls that wait (:mod:`.schedule`:
a segment moves each stream's running maximum by one number, and every row's times come from one
pass over the streams once the waits are known). A graph may be a window of the process's calls
(:mod:`.store`): the windows are replayed in order, each handing the next what the replay had
reached (:class:`Carry`: the host's shift, each stream's running numbers, the ends of the rows
waited for), and give the times one replay of the whole would.

A row that waited on the GPU for a collective on another stream of its device (DDP's optimizer
after the gradients' all-reduce, through an event the trace does not name) is found by its time:
launched well before it started, it started within ``DEP_GAP_NS`` (:mod:`.store`) of the end of a
communication kernel launched before it on another stream. It is replayed after that kernel,
its launch taking the usual delay; a segment starts at its launching call, so that the kernel it
waits for is replayed before it.

Across ranks (:mod:`.coupled`), a collective's rows are given :class:`Floors`: the row cannot
start its transfer before the last rank arrives (``release``), and takes the transfer's time
(``dur``); its replayed start stays where its stream reached it (its arrival), so that it spans
its wait as the trace's kernel does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from traceconv.analyses import intervals as I
from traceconv.analyses.whatif.graph import NONE, Graph
from traceconv.analyses.whatif.schedule import Schedule, along_lanes, group_max, lane_maximum, schedule

NO_WAIT_NS = 3_000  # what a sync costs the host when it has nothing to wait for (at most its own time)
DEVICE_WIDE = ("Device", "Ctx", "Thread")  # syncs that wait for every stream of the device


@dataclass(frozen=True)
class Change:
    """What a change does to the graph: host time added before each call (negative: removed), each
    call's own duration change, each GPU row's duration factor (0: removed), and the calls that no
    longer wait."""

    host: I.I64  # per call: ns added to the host's time before it
    call: I.I64  # per call: ns added to its own duration (calls that do not wait)
    gpu: np.ndarray  # per GPU row: its duration's factor
    no_wait: I.Bools  # per call: it no longer waits for the GPU

    @classmethod
    def none(cls, g: Graph) -> Change:
        n, m = len(g.calls.start), len(g.gpu.start)
        return cls(np.zeros(n, np.int64), np.zeros(n, np.int64), np.ones(m), np.zeros(n, np.bool_))


@dataclass(frozen=True)
class Floors:
    """Collectives' rows held back by the other ranks: per row (``rows``: indexes into the GPU rows),
    when its transfer may begin at the earliest (the last rank's arrival, on this rank's clock) and
    the transfer's time."""

    rows: I.I64
    release: I.I64
    dur: I.I64


@dataclass(frozen=True)
class Timeline:
    """The replayed times: calls' start and end, GPU rows' start and end."""

    call_start: I.I64
    call_end: I.I64
    gpu_start: I.I64
    gpu_end: I.I64


@dataclass
class Carry:
    """What the replay of the windows before hands the next (none: the first): the host's shift,
    the change's host time so far, and per lane the running numbers of :mod:`.schedule`."""

    shift: int = 0
    host: int = 0  # the change's host time added before the window (``Change.host``)
    call: int = 0  # and to the calls' own durations (``Change.call``)
    best: dict[int, int] = field(default_factory=dict)  # per lane: the running maximum of ready + dur - T
    last_total: dict[int, int] = field(default_factory=dict)  # per lane: T at its last row
    known: dict[int, int] = field(default_factory=dict)  # the replayed end of each row others wait for (by id)


@dataclass(frozen=True)
class _Prepared:
    """What the replay needs of the trace, worked out once for every change."""

    ready: I.I64  # per GPU row: its launching call's start to its own start, where the launch bound it
    gap: I.I64  # per GPU row: the gap after its stream's previous row, where the stream bound it
    waits: I.I64  # the indices of the calls that wait, in order
    target_lane: I.I64  # per waiting call: the lane of the GPU row it waited for (-1: none: it did not wait)
    device_wide: I.Bools  # per waiting call: it waits for every stream of the device
    tail: I.I64  # per waiting call: from the end of what it waited for to its own end
    lanes_of_device: dict[int, list[int]]  # the streams (lanes) of each device
    schedule: Schedule  # the order the rows are replayed in


def prepare(g: Graph, last: dict[int, int] | None = None) -> _Prepared:
    """What the replay needs of the graph (``last``: per lane, the end of the last row launched in
    the windows before, updated with this one's; None: the graph is the whole process)."""
    c, r = g.calls, g.gpu
    prev_end = r.prev_end
    has_prev = prev_end != NONE
    launched = r.call >= 0
    call_at = np.where(launched, c.start[np.maximum(r.call, 0)], r.start)
    since_call = r.start - call_at
    stream_gap = np.where(has_prev, r.start - prev_end, 0)
    usual_launch, usual_gap = g.usual  # over the whole process (:mod:`.store`)
    # which constraint bound each row: the one whose usual earliest start came later
    by_stream = has_prev & (prev_end + usual_gap >= call_at + usual_launch)
    # the binding constraint keeps the trace's own delay; the other its usual one, never more than the trace's
    ready = np.where(by_stream, np.minimum(usual_launch, since_call), since_call)
    gap = np.where(by_stream, stream_gap, np.minimum(usual_gap, np.maximum(stream_gap, 0)))
    ready = np.where(r.dep >= 0, np.minimum(usual_launch, since_call), ready)
    waits, target_lane, device_wide, tail = _waits(g, {} if last is None else last)
    lanes: dict[int, list[int]] = {}
    for ln, dev in enumerate(g.lane_device.tolist()):
        lanes.setdefault(int(dev), []).append(ln)
    return _Prepared(ready, gap, waits, target_lane, device_wide, tail, lanes, schedule(g, waits, r.dep))


def _waits(g: Graph, last: dict[int, int]) -> tuple[I.I64, I.I64, I.Bools, I.I64]:
    """The calls that wait: syncs, and calls that returned only after a GPU row they launched ended
    (a staged or synchronous copy); for each, the lane of the row it waited for (of each stream's
    last row launched by it or before it, the latest to end inside the call) and the tail after it.
    ``last``: per lane, the end of its last row launched before the graph's calls (updated)."""
    c, r = g.calls, g.gpu
    launched = r.call >= 0
    own_end = np.full(len(c.start), np.iinfo(np.int64).min, np.int64)
    np.maximum.at(own_end, r.call[launched], r.end[launched])
    waits = np.flatnonzero(c.sync | ((own_end <= c.end) & (own_end >= c.start)))
    best = np.full(len(waits), np.iinfo(np.int64).min, np.int64)
    target = np.full(len(waits), -1, np.int64)
    for ln in sorted({*np.unique(r.lane[launched]).tolist(), *last}):
        rows = np.flatnonzero(launched & (r.lane == ln))
        rows = rows[np.argsort(r.call[rows], kind="stable")]
        at = np.searchsorted(r.call[rows], waits, side="right") - 1  # the lane's last row launched up to each
        end = r.end[rows[np.maximum(at, 0)]] if len(rows) else np.zeros(len(waits), np.int64)
        found = at >= 0
        if ln in last:
            end, found = np.where(found, end, last[ln]), np.ones(len(waits), np.bool_)
        inside = found & (end <= c.end[waits]) & (end >= c.start[waits]) & (end > best)
        best = np.where(inside, end, best)
        target = np.where(inside, ln, target)
        if len(rows):
            last[ln] = int(r.end[rows[-1]])
    device_wide = c.name.where(lambda n: any(d in n for d in DEVICE_WIDE))[waits]
    tail = np.where(target >= 0, c.end[waits] - best, 0)
    return waits, target, device_wide, tail


def replay(
    g: Graph, p: _Prepared, change: Change, floors: Floors | None = None, carry: Carry | None = None
) -> Timeline:
    """The graph replayed with ``change`` (``floors``: the collectives held back by other ranks, for a
    whole graph; ``carry``: what the windows before reached, updated with this one)."""
    c, r, s = g.calls, g.gpu, p.schedule
    carry = carry if carry is not None else Carry()
    host_before = np.cumsum(change.host) + carry.host
    host_before[1:] += np.cumsum(change.call)[:-1]
    host_before += carry.call
    dur = np.rint((r.end - r.start) * change.gpu).astype(np.int64)
    release = None
    if floors is not None and len(floors.rows):
        dur[floors.rows] = floors.dur
        release = np.full(len(r.start), NONE, np.int64)
        release[floors.rows] = floors.release
    rows = s.rows
    lanes = _Lanes.of(g, p, s, rows, dur, host_before, release, carry.last_total)
    best = np.full(len(g.lane_device), NONE, np.int64)  # per lane: the running maximum the windows before reached
    for ln, v in carry.best.items():
        best[ln] = v
    shifts, returned, dep_free = _segments(g, p, s, lanes, change, host_before, carry)
    call_shift = np.asarray(shifts, np.int64)[s.seg_of_call]
    call_start = c.start + host_before + call_shift
    call_end = c.end + host_before + change.call + call_shift
    call_end[p.waits[: len(returned)]] = returned
    free = lanes.launch + np.where(lanes.launched, np.asarray(shifts, np.int64)[s.seg], 0)
    for at, value in dep_free.items():
        free[at] = value
    ready = free if lanes.release is None else np.maximum(free, lanes.release)
    end = lanes.total + np.maximum(lane_maximum(s, ready + lanes.dur - lanes.total, best), NONE)
    gpu_start = r.start.copy()
    gpu_end = r.end.copy()
    gpu_end[rows] = end
    gpu_start[rows] = end - lanes.dur
    if lanes.release is not None:  # a held row starts (arrives) where its stream reached it
        held = np.flatnonzero(lanes.release != NONE)
        prev = np.full(len(rows), NONE, np.int64)
        prev[s.by_lane[1:]] = end[s.by_lane[:-1]]
        prev[s.by_lane[s.lane_starts[:-1]]] = NONE
        arrived = np.maximum(free[held], prev[held] + p.gap[rows[held]])
        gpu_start[rows[held]] = np.minimum(arrived, end[held] - lanes.dur[held])
    carry.host += int(change.host.sum())
    carry.call += int(change.call.sum())
    return Timeline(call_start, call_end, gpu_start, gpu_end)


@dataclass(frozen=True)
class _Lanes:
    """The replayed rows' numbers, per position in the schedule: their launch as if the host did not
    move (their launching call's start plus the launch's delay; a row with no call: its start), the
    running sum ``T`` of ``gap + dur`` along the lane, and per group the largest ``launch + dur - T``
    of its launched rows (they move with the host) and of the others (they do not)."""

    launch: I.I64
    launched: I.Bools
    dur: I.I64
    total: I.I64
    release: I.I64 | None
    moving: list[int]
    fixed: list[int]
    total_last: list[int]

    @classmethod
    def of(
        cls,
        g: Graph,
        p: _Prepared,
        s: Schedule,
        rows: I.I64,
        dur: I.I64,
        host_before: I.I64,
        rel: I.I64 | None,
        last_total: dict[int, int],
    ) -> _Lanes:
        c, r = g.calls, g.gpu
        call = r.call[rows]
        launched = call >= 0
        at = np.maximum(call, 0)
        launch = np.where(launched, c.start[at] + host_before[at] + p.ready[rows], r.start[rows])
        d = dur[rows]
        total = along_lanes(s, p.gap[rows] + d)
        if last_total:  # T goes on from where the windows before left it
            base = np.zeros(len(g.lane_device), np.int64)
            for ln, v in last_total.items():
                base[ln] = v
            total += base[s.lane]
        w = launch + d - total
        fixed_w = np.where(launched, NONE, w)
        release = None if rel is None else rel[rows]
        if release is not None:
            fixed_w = np.maximum(fixed_w, np.where(release != NONE, release + d - total, NONE))
        moving = group_max(s, np.where(launched, w, NONE))
        last = total[s.group[1:] - 1].tolist()
        return cls(launch, launched, d, total, release, moving, group_max(s, fixed_w), last)


def _segments(
    g: Graph, p: _Prepared, s: Schedule, lanes: _Lanes, change: Change, host_before: I.I64, carry: Carry
) -> tuple[list[int], list[int], dict[int, int]]:
    """Segment by segment: the host's shift in each, when each waiting call returns, and the ready
    time of each row that waits for a collective (its position in the schedule: the time); ``carry``
    goes on to the end of the graph."""
    c = g.calls
    w = p.waits
    own = (c.end[w] - c.start[w]).tolist()
    at_start = (c.start[w] + host_before[w]).tolist()
    at_end = (c.end[w] + host_before[w]).tolist()
    tail, wide, no_wait = p.tail.tolist(), p.device_wide.tolist(), change.no_wait[w].tolist()
    target_lane = p.target_lane.tolist()
    target_device = g.lane_device[np.maximum(p.target_lane, 0)].tolist()
    best = carry.best  # per lane: the running maximum of ready + dur - T, so far
    last_total = carry.last_total  # per lane: T at its last row so far
    known = carry.known  # the replayed end of each row that others wait for (by its number)
    dep_free: dict[int, int] = {}
    shifts: list[int] = []
    returned: list[int] = []
    shift = carry.shift
    for k, wait in enumerate(s.wait_of):
        shifts.append(shift)
        for gi in range(s.seg_groups[k], s.seg_groups[k + 1]):
            ln = s.group_lane[gi]
            was = best.get(ln, NONE)
            if s.special[gi]:
                best[ln] = _special(g, p, s, lanes, gi, shift, was, known, dep_free)
            else:
                best[ln] = max(was, lanes.moving[gi] + shift, lanes.fixed[gi])
            last_total[ln] = lanes.total_last[gi]
        if wait < 0:
            continue
        start = at_start[wait] + shift
        if target_lane[wait] < 0:  # it did not wait in the trace either
            back = start + own[wait]
        elif no_wait[wait]:
            back = start + min(own[wait], NO_WAIT_NS)
        else:
            lns = p.lanes_of_device[target_device[wait]] if wide[wait] else [target_lane[wait]]
            done = max(last_total[ln] + best[ln] if ln in best else 0 for ln in lns)
            back = max(start + min(own[wait], NO_WAIT_NS), done + tail[wait])
        returned.append(back)
        shift = back - at_end[wait]
    carry.shift = shift
    return shifts, returned, dep_free


def _special(
    g: Graph,
    p: _Prepared,
    s: Schedule,
    lanes: _Lanes,
    gi: int,
    shift: int,
    was: int,
    known: dict[int, int],
    dep_free: dict[int, int],
) -> int:
    """A group that holds a row waiting for a collective, or one waited for, row by row: its rows
    that wait start no earlier than their collective's end (plus the trace's gap), and the ends of
    those waited for are kept. The lane's running maximum after it."""
    lo, hi = int(s.group[gi]), int(s.group[gi + 1])
    rows = s.rows[lo:hi]
    free = lanes.launch[lo:hi] + np.where(lanes.launched[lo:hi], shift, 0)
    dep = g.gpu.dep[rows]
    for j in np.flatnonzero(dep >= 0).tolist():
        gap = int(g.gpu.dep_gap[rows[j]])  # from the collective's end to its own start
        free[j] = max(int(free[j]), known[int(dep[j])] + gap)
        dep_free[lo + j] = int(free[j])
    ready = free if lanes.release is None else np.maximum(free, lanes.release[lo:hi])
    best = np.maximum(np.maximum.accumulate(ready + lanes.dur[lo:hi] - lanes.total[lo:hi]), was)
    a, b = np.searchsorted(s.waited, [lo, hi])
    for at in s.waited[a:b].tolist():
        known[int(g.gpu.row[s.rows[at]])] = int(lanes.total[at] + best[at - lo])
    return int(best[-1])
