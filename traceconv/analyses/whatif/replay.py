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
the change. Rows are replayed segment by segment between the calls that wait, each segment in
numpy (a stream's rows by a running maximum of cumulative sums).

A row that waited on the GPU for a collective on another stream of its device (DDP's optimizer
after the gradients' all-reduce, through an event the trace does not name) is found by its time:
launched well before it started, it started within :data:`DEP_GAP_NS` of the end of a
communication kernel launched before it on another stream. It is replayed after that kernel,
its launch taking the usual delay; a segment starts at its launching call, so that the kernel it
waits for is replayed before it.

Across ranks (:mod:`.coupled`), a collective's rows are given :class:`Floors`: the row cannot
start its transfer before the last rank arrives (``release``), and takes the transfer's time
(``dur``); its replayed start stays where its stream reached it (its arrival), so that it spans
its wait as the trace's kernel does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from traceconv.analyses import intervals as I
from traceconv.analyses.whatif.graph import Graph

NO_WAIT_NS = 3_000  # what a sync costs the host when it has nothing to wait for (at most its own time)
DEVICE_WIDE = ("Device", "Ctx", "Thread")  # syncs that wait for every stream of the device
NONE = np.iinfo(np.int64).min // 2  # no previous row
DEP_GAP_NS = 10_000  # a row that starts this soon after a collective on another stream ended waited for it


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


@dataclass(frozen=True)
class _Prepared:
    """What the replay needs of the trace, worked out once for every change."""

    ready: I.I64  # per GPU row: its launching call's start to its own start, where the launch bound it
    gap: I.I64  # per GPU row: the gap after its stream's previous row, where the stream bound it
    waits: I.I64  # the indices of the calls that wait, in order
    target: I.I64  # per waiting call: the GPU row it waited for (-1: none: it did not wait)
    device_wide: I.Bools  # per waiting call: it waits for every stream of the device
    tail: I.I64  # per waiting call: from the end of what it waited for to its own end
    lanes_of_device: dict[int, list[int]]  # the streams (lanes) of each device
    dep: I.I64  # per GPU row: the collective on another stream it waited for (-1: none)
    dep_gap: I.I64  # per GPU row: from that collective's end to its own start


def prepare(g: Graph) -> _Prepared:
    c, r = g.calls, g.gpu
    prev_end = _previous_on_lane(r.lane, r.end)
    has_prev = prev_end != NONE
    launched = r.call >= 0
    call_at = np.where(launched, c.start[np.maximum(r.call, 0)], r.start)
    since_call = r.start - call_at
    stream_gap = np.where(has_prev, r.start - prev_end, 0)
    # the usual delays: from a call's start to its row's start where the stream was free when the call
    # began, and from a row's end to the next where the stream was busy when that one's call began
    free = launched & (~has_prev | (prev_end <= call_at))
    busy = launched & has_prev & (prev_end > call_at) & (stream_gap >= 0)
    usual_launch = int(np.median(since_call[free])) if free.any() else 0
    usual_gap = int(np.median(stream_gap[busy])) if busy.any() else 0
    # which constraint bound each row: the one whose usual earliest start came later
    by_stream = has_prev & (prev_end + usual_gap >= call_at + usual_launch)
    # the binding constraint keeps the trace's own delay; the other its usual one, never more than the trace's
    ready = np.where(by_stream, np.minimum(usual_launch, since_call), since_call)
    gap = np.where(by_stream, stream_gap, np.minimum(usual_gap, np.maximum(stream_gap, 0)))
    dep = _collective_waits(
        g, launched & ~by_stream & (since_call > 2 * usual_launch + DEP_GAP_NS), call_at + usual_launch
    )
    ready = np.where(dep >= 0, np.minimum(usual_launch, since_call), ready)
    dep_gap = np.where(dep >= 0, r.start - r.end[np.maximum(dep, 0)], 0)
    waits, target, device_wide, tail = _waits(g)
    lanes: dict[int, list[int]] = {}
    for dev, ln in set(zip(r.device.tolist(), r.lane.tolist(), strict=True)):
        lanes.setdefault(int(dev), []).append(int(ln))
    return _Prepared(ready, gap, waits, target, device_wide, tail, lanes, dep, dep_gap)


def _collective_waits(g: Graph, late: I.Bools, usual_start: I.I64) -> I.I64:
    """Per row, the communication kernel on another stream of its device that it waited for (-1:
    none): of the rows started late after their launch (``late``), those that started within
    :data:`DEP_GAP_NS` of the end of such a kernel, launched before them, that ended after they
    would usually have started."""
    r = g.gpu
    dep = np.full(len(r.start), -1, np.int64)
    comm = np.flatnonzero((r.klass == 2) & (r.call >= 0))
    for dev in np.unique(r.device[comm]):
        mine = comm[r.device[comm] == dev]
        mine = mine[np.argsort(r.end[mine], kind="stable")]
        rows = np.flatnonzero(late & (r.device == dev))
        at = np.searchsorted(r.end[mine], r.start[rows], side="right") - 1
        j = mine[np.maximum(at, 0)]
        ok = (at >= 0) & (r.lane[j] != r.lane[rows]) & (r.start[rows] - r.end[j] <= DEP_GAP_NS)
        ok &= (r.end[j] > usual_start[rows]) & (r.call[j] < r.call[rows])
        dep[rows[ok]] = j[ok]
    return dep


def _previous_on_lane(lane: I.I64, end: I.I64) -> I.I64:
    """Each row's previous row's end on its lane (rows in start order); a very small number for the first."""
    order = np.lexsort((np.arange(len(lane)), lane))
    prev = np.full(len(lane), NONE, np.int64)
    same = lane[order][1:] == lane[order][:-1]
    prev[order[1:][same]] = end[order[:-1][same]]
    return prev


def _waits(g: Graph) -> tuple[I.I64, I.I64, I.Bools, I.I64]:
    """The calls that wait: syncs, and calls that returned only after a GPU row they launched ended
    (a staged or synchronous copy); for each, the row it waited for (of each stream's last row
    launched by it or before it, the latest to end inside the call) and the tail after it."""
    c, r = g.calls, g.gpu
    launched = r.call >= 0
    own_end = np.full(len(c.start), np.iinfo(np.int64).min, np.int64)
    np.maximum.at(own_end, r.call[launched], r.end[launched])
    waits = np.flatnonzero(c.sync | ((own_end <= c.end) & (own_end >= c.start)))
    best = np.full(len(waits), np.iinfo(np.int64).min, np.int64)
    target = np.full(len(waits), -1, np.int64)
    for ln in np.unique(r.lane[launched]):
        rows = np.flatnonzero(launched & (r.lane == ln))
        rows = rows[np.argsort(r.call[rows], kind="stable")]
        last = np.searchsorted(r.call[rows], waits, side="right") - 1  # the lane's last row launched up to each
        row = rows[np.maximum(last, 0)]
        end = r.end[row]
        inside = (last >= 0) & (end <= c.end[waits]) & (end >= c.start[waits]) & (end > best)
        best = np.where(inside, end, best)
        target = np.where(inside, row, target)
    device_wide = c.name.where(lambda n: any(d in n for d in DEVICE_WIDE))[waits]
    tail = np.where(target >= 0, c.end[waits] - best, 0)
    return waits, target, device_wide, tail


def replay(g: Graph, p: _Prepared, change: Change, floors: Floors | None = None) -> Timeline:
    c, r = g.calls, g.gpu
    n = len(c.start)
    host_before = np.cumsum(change.host) + np.concatenate(([0], np.cumsum(change.call)[:-1]))
    call_start = np.empty(n, np.int64)
    call_end = np.empty(n, np.int64)
    gpu_start = r.start.copy()
    gpu_end = r.end.copy()
    dur = np.rint((r.end - r.start) * change.gpu).astype(np.int64)
    release = None
    if floors is not None and len(floors.rows):
        dur[floors.rows] = floors.dur
        release = np.full(len(r.start), NONE, np.int64)
        release[floors.rows] = floors.release
    lane_end: dict[int, int] = {}
    by_call = np.argsort(np.where(r.call >= 0, r.call, np.searchsorted(c.start, r.start)), kind="stable")
    row_call = np.where(r.call >= 0, r.call, np.searchsorted(c.start, r.start))[by_call]
    shift = 0  # what the waits so far moved the host by
    first = 0
    held = r.call[(p.dep >= 0) & (r.call > 0)] - 1  # a segment ends before each call whose row waits for a collective
    bounds = sorted({*[int(w) for w in p.waits], *[int(h) for h in held], n - 1})
    wait_at = {int(w): k for k, w in enumerate(p.waits)}
    for last in bounds:
        seg = slice(first, last + 1)
        call_start[seg] = c.start[seg] + host_before[seg] + shift
        call_end[seg] = c.end[seg] + host_before[seg] + change.call[seg] + shift
        lo, hi = np.searchsorted(row_call, [first, last + 1])
        rows = by_call[lo:hi]
        if len(rows):
            _run_rows(r, p, rows, call_start, dur, (gpu_start, gpu_end), lane_end, release)
        if last in wait_at:
            k, w = wait_at[last], last
            call_end[w] = _returns(g, p, k, w, call_start, lane_end, change)
            shift = int(call_end[w] - c.end[w] - host_before[w])
        first = last + 1
    return Timeline(call_start, call_end, gpu_start, gpu_end)


def _returns(
    g: Graph, p: _Prepared, k: int, w: int, call_start: I.I64, lane_end: dict[int, int], change: Change
) -> int:
    """When waiting call ``w`` returns in the replay: when what it waited for (its stream's rows
    launched so far, or its device's) has ended, plus the trace's tail; at once if it no longer waits."""
    c, r = g.calls, g.gpu
    own = int(c.end[w] - c.start[w])
    t = int(p.target[k])
    if t < 0:  # it did not wait in the trace either
        return int(call_start[w]) + own
    alone = int(call_start[w]) + min(own, NO_WAIT_NS)
    if change.no_wait[w]:
        return alone
    if p.device_wide[k]:
        done = max(lane_end.get(int(ln), 0) for ln in p.lanes_of_device[int(r.device[t])])
    else:
        done = lane_end.get(int(r.lane[t]), 0)
    return max(alone, done + int(p.tail[k]))


def _run_rows(
    r: object,
    p: _Prepared,
    rows: I.I64,
    call_start: I.I64,
    dur: I.I64,
    out: tuple[I.I64, I.I64],
    lane_end: dict[int, int],
    release: I.I64 | None = None,
) -> None:
    """The rows launched by one segment's calls, stream by stream: ``start = max(ready, previous end
    + gap)``, as ``end_j = P_j + max(E0, max_{k<=j}(ready_k + d_k - P_k))`` with ``P`` the running sum
    of ``gap + d``. A row with a ``release`` is ready no earlier than it, and starts (arrives) where
    it would have without it."""
    gpu_start, gpu_end = out
    call, lane = r.call[rows], r.lane[rows]  # type: ignore[attr-defined]
    launch = np.where(call >= 0, call_start[np.maximum(call, 0)] + p.ready[rows], r.start[rows])  # type: ignore[attr-defined]
    dep = p.dep[rows]
    ready: I.I64 = np.where(dep >= 0, np.maximum(launch, gpu_end[np.maximum(dep, 0)] + p.dep_gap[rows]), launch)
    for ln in np.unique(lane):
        mine = rows[lane == ln]
        order = np.argsort(r.start[mine], kind="stable")  # type: ignore[attr-defined]
        mine = mine[order]
        free = ready[lane == ln][order]
        rd = free if release is None else np.maximum(free, release[mine])
        d = dur[mine]
        step = p.gap[mine] + d
        total = np.cumsum(step)
        e0 = lane_end.get(int(ln), NONE)
        best = np.maximum.accumulate(rd + d - total)
        end = total + np.maximum(best, e0)
        gpu_end[mine] = end
        gpu_start[mine] = end - d
        if release is not None:
            held = release[mine] != NONE
            arrived = np.maximum(free, np.r_[e0, end[:-1]] + p.gap[mine])
            gpu_start[mine[held]] = np.minimum(arrived[held], (end - d)[held])
        lane_end[int(ln)] = int(end[-1])
