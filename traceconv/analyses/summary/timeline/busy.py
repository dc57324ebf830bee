"""GPU busy and idle time per device, and the idle time by cause, in one sorted pass over the time line.

Idle time goes to the first cause in a cascade: a GPU row is open (busy), else something was
queued, else the host synced, else it was in a CUDA call, else no cause the trace shows. The
time of each cause is the difference of nested unions: with B the GPU rows, Q the queued spans,
Y the syncs and A the CUDA calls, busy is |B|, queued |B u Q| - |B|, host sync
|B u Q u Y| - |B u Q|, and so on, each clipped to each scope's windows. The time line is cut
into slices of about :data:`SLICE_ROWS` intervals (at quantiles of a sample of the starts), each
with its intervals clipped to it: a union's time is the sum of its time in each slice. A slice's
intervals of all four sets come from DuckDB as they lie, and numpy sorts them by start: each set
is stored nearly in time order, so the slice is a few sorted runs, which a stable sort merges
several times faster than DuckDB sorts them. Each union is then merged a batch at a time (a
running maximum of the ends: a new segment starts where an interval starts after every earlier
one ended), carried over from batch to batch. Nothing holds more than a slice, however long the
trace (a slice that the cuts cannot split, of starts that tie, is sorted by DuckDB within its
budget). One pass for every scope together, whatever the number of kernels and calls. The host's
sets count for every device.
Definitions: :mod:`traceconv.analyses.summary.verdict`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from traceconv.analyses import intervals as I
from traceconv.analyses.prepare import LAUNCH_GAP_NS, op_names
from traceconv.analyses.results import DeviceTime, IdleBreakdown
from traceconv.analyses.source import Source, one_of
from traceconv.analyses.summary.scopes import GpuWindows
from traceconv.analyses.summary.timeline import gaps as G
from traceconv.analyses.vocabulary import comm_kernels

Segments = tuple[I.I64, I.I64]
COMM_OPS = "c10d::"  # what the name of an operator that communicates starts with (and record_param_comms)


def gpu_times(source: Source) -> str:
    """What the sweep reads of each GPU row (by default; measure.py passes its table of them): kernels,
    copies, memsets, and CUDA graphs traced whole, with their class: communication by the kernel's
    name or its operator's (tested against the few distinct names, not on every row)."""
    kernels = comm_kernels(source)
    ops = [n for n in op_names(source) if n == "record_param_comms" or n.startswith(COMM_OPS)]
    comm = f"kind = 'kernel' AND ({one_of('name', kernels)} OR {one_of('op_name', ops)})" if kernels or ops else "false"
    return (
        "SELECT device, start_ns, end_ns, launch_end_ns, "
        f"CAST(CASE WHEN kind IN ('memcpy', 'memset') THEN 2 WHEN {comm} THEN 1 ELSE 0 END AS UTINYINT) AS klass "
        "FROM events WHERE kind IN ('kernel', 'memcpy', 'memset', 'graph')"
    )


# GPU rows by class (compute, communication, copies: each a set), their queued spans, host syncs, host
# CUDA calls: the cascade's order. Level k's union holds the sets up to k; the GPU rows are level BUSY.
SETS = ("compute", "comm", "copy", "q", "y", "a")
BUSY = SETS.index("copy")
CLASSES = ("compute", "communication", "copies")  # what a GPU row's time was, where classes overlap in this order
CAUSES = ("queued", "host_sync", "host_launch", "host_other")
BATCH_ROWS = 1 << 18  # intervals fetched, and merged into the unions, at a time
SLICE_ROWS = 1 << 19  # intervals a slice of the time line holds (what numpy sorts at once), about
SAMPLE_ROWS = 1 << 16  # the starts sampled (about) to cut the time line into slices
HELD_SLICES = 4  # a slice is sorted in numpy up to this many times SLICE_ROWS intervals, else by DuckDB


@dataclass(frozen=True)
class Swept:
    """One scope: per device its busy, idle and window time; the idle time by cause; the idle gaps
    by cause; and, where asked for, each window's time by part (:data:`PARTS`, summed over devices)."""

    times: dict[str, DeviceTime]
    idle: IdleBreakdown
    gaps: G.GapCosts
    per_window: np.ndarray | None = None


# A window's time by part: its GPU rows by class, then its idle gaps by cause (gaps.KINDS).
PARTS = (*CLASSES, *G.KINDS)


def sweep(
    source: Source,
    sync_sql: str,
    api_sql: str,
    windows: Sequence[GpuWindows | Segments],
    gpu_sql: str | None = None,
    launch_gap_ns: int = LAUNCH_GAP_NS,
    per_window: Sequence[bool] = (),
) -> list[Swept]:
    """For each scope's ``windows``: per device its busy time, idle time and the windows' length, and
    the idle time of all devices together split by cause; for the scopes ``per_window`` flags, each
    window's time by part. ``sync_sql`` and ``api_sql`` give the host's intervals (s, e), ``gpu_sql``
    the GPU rows' device, start_ns, end_ns, launch_end_ns and class; each is read once per slice of
    the time line, so tables, not views of a file (None: :func:`gpu_times`)."""
    timed = f"SELECT * FROM ({gpu_sql or gpu_times(source)}) WHERE start_ns IS NOT NULL AND end_ns IS NOT NULL"
    devices = sorted(
        (str(d) for d in source.arrow(f"SELECT DISTINCT {_DEV} AS dev FROM ({timed})")["dev"].to_pylist()),
        key=_device_order,
    )
    scoped = [w if isinstance(w, GpuWindows) else GpuWindows(w) for w in windows]
    flags = [k < len(per_window) and bool(per_window[k]) for k in range(len(windows))]
    spent = np.zeros((len(windows), 1 + len(CAUSES)), np.int64)  # per scope: busy, then the causes
    times: list[dict[str, DeviceTime]] = [{} for _ in windows]
    gaps = [G.GapCosts() for _ in windows]
    parts: list[np.ndarray | None] = [
        np.zeros((len(w.default[0]), len(PARTS)), np.int64) if flag else None
        for w, flag in zip(scoped, flags, strict=True)
    ]
    for dev in devices:
        mine = [w.of(dev) for w in scoped]
        lengths = [int((e - s).sum()) for s, e in mine]
        one = _one_device(source, _spans(timed, dev, sync_sql, api_sql), mine, launch_gap_ns, flags)
        for k, g in enumerate(one.gaps):
            gaps[k].add(g)
            if parts[k] is not None:
                parts[k] += one.parts[k]  # type: ignore[operator]
        for k, window_ns in enumerate(lengths):
            times[k][dev] = DeviceTime(
                busy_ns=int(one.spent[k, 0]), idle_ns=window_ns - int(one.spent[k, 0]), window_ns=window_ns
            )
        spent += one.spent
    return [
        Swept(times[k], IdleBreakdown(**{c: int(spent[k, 1 + i]) for i, c in enumerate(CAUSES)}), gaps[k], parts[k])
        for k in range(len(windows))
    ]


_DEV = "coalesce(CAST(device AS VARCHAR), 'unknown')"  # a device as the results name it


def _spans(timed: str, dev: str, sync_sql: str, api_sql: str) -> str:
    """The intervals (s, e, c) of the sets of one device (``c``: the set's place in :data:`SETS`),
    empty ones left out: its GPU rows by class, their queued spans (launch call's end to start), and
    the host's."""
    mine = f"SELECT * FROM ({timed}) WHERE " + (
        "device IS NULL" if dev == "unknown" else f"device = {int(dev)}"  # _DEV's inverse
    )
    q, y, a = (SETS.index(x) for x in ("q", "y", "a"))
    sets = (
        f"SELECT start_ns AS s, end_ns AS e, klass AS c FROM ({mine})",
        f"SELECT launch_end_ns AS s, start_ns AS e, {q} AS c FROM ({mine}) WHERE launch_end_ns IS NOT NULL",
        f"SELECT s, e, {y} AS c FROM ({sync_sql})",
        f"SELECT s, e, {a} AS c FROM ({api_sql})",
    )
    return " UNION ALL ".join(f"SELECT s, e, CAST(c AS UTINYINT) AS c FROM ({sql}) WHERE e > s" for sql in sets)


@dataclass(frozen=True)
class _Device:
    spent: np.ndarray  # per scope: busy, then the idle time by cause
    gaps: list[G.GapCosts]
    parts: list[np.ndarray | None]  # per flagged scope: each window's time by part


def _one_device(
    source: Source, spans: str, windows: Sequence[Segments], launch_gap_ns: int, per_window: Sequence[bool] = ()
) -> _Device:
    """Busy and idle-by-cause time of one device inside each scope's windows (a row per scope), from
    the ``spans`` of its sets; its idle gaps by cause (:mod:`traceconv.analyses.summary.timeline.gaps`);
    and for the scopes ``per_window`` flags, each window's time by part."""
    flags = [k < len(per_window) and bool(per_window[k]) for k in range(len(windows))]
    # the nested levels: compute, + comm, ... + CUDA calls; the gaps take the segments from BUSY up. The
    # levels below BUSY count only for the windows one by one: the scopes' figures start at BUSY.
    unions = [
        _Union(windows, flags, segments=level >= BUSY, counted=flags if level < BUSY else None)
        for level in range(len(SETS))
    ]
    gaps = G.GapTally(windows, launch_gap_ns, flags)
    for lo, hi in _slices(source, spans):
        inside = " AND ".join(
            ["true", *([f"e > {lo}"] if lo is not None else []), *([f"s < {hi}"] if hi is not None else [])]
        )
        clipped = (
            f"SELECT {_clip('s', lo, 'greatest')} AS s, {_clip('e', hi, 'least')} AS e, c "
            f"FROM (SELECT * FROM ({spans}) WHERE {inside})"
        )
        for s, e, c in _in_order(source, clipped):
            # each level on the rows of its sets, from the widest down: the sets before the last, then
            # the ones before those (indices of the rows kept: a boolean mask is slower to subscript)
            for level in range(len(SETS) - 1, -1, -1):
                unions[level].add(s, e)
                if level:
                    kept = np.flatnonzero(c < level)
                    s, e, c = s[kept], e[kept], c[kept]
        gaps.slice(lo, hi, [u.take() for u in unions[BUSY:]])
    covered = np.stack([u.finish() for u in unions], axis=1)  # per scope: |U0|, |U1|, ...
    lengths = np.array([int((we - ws).sum()) for ws, we in windows], np.int64)
    out = np.zeros((len(windows), 1 + len(CAUSES)), np.int64)
    out[:, 0] = covered[:, BUSY]
    out[:, 1:-1] = np.diff(covered[:, BUSY:], axis=1)
    out[:, -1] = lengths - covered[:, -1]
    costs = gaps.finish()
    parts: list[np.ndarray | None] = []
    for k, flag in enumerate(flags):
        if not flag:
            parts.append(None)
            continue
        levels = np.stack([u.per_window[k] for u in unions[: BUSY + 1]], axis=1)  # type: ignore[misc]
        parts.append(np.concatenate([levels[:, :1], np.diff(levels, axis=1), gaps.per_window[k]], axis=1))
    return _Device(out, costs, parts)


def _in_order(source: Source, clipped: str) -> Iterator[tuple[I.I64, I.I64, np.ndarray]]:
    """A slice's intervals (s, e, c) sorted by start, a batch at a time: fetched as they lie and
    sorted in numpy (a merge of the sets' runs). A slice of more than :data:`HELD_SLICES` times
    :data:`SLICE_ROWS` intervals (starts that tie, which no cut splits) is sorted by DuckDB
    instead, within its memory budget."""
    parts: list[list[np.ndarray]] = []
    held = 0
    for batch in source.batches(clipped, BATCH_ROWS):
        parts.append([np.asarray(batch.column(i).to_numpy()) for i in range(3)])
        held += batch.num_rows
        if held > HELD_SLICES * SLICE_ROWS:
            break
    else:
        if not parts:
            return
        starts, ends, sets = (np.concatenate(p) for p in zip(*parts, strict=True))
        del parts
        order = np.argsort(starts, kind="stable")
        for at in range(0, len(order), BATCH_ROWS):
            rows = order[at : at + BATCH_ROWS]
            yield starts[rows], ends[rows], sets[rows]
        return
    del parts
    for batch in source.batches(f"{clipped} ORDER BY s", BATCH_ROWS):
        s, e, c = (np.asarray(batch.column(i).to_numpy()) for i in range(3))
        yield s, e, c


def _slices(source: Source, spans: str) -> list[tuple[int | None, int | None]]:
    """Consecutive slices of the time line, ``[lo, hi)`` (None: unbounded), of about
    :data:`SLICE_ROWS` of the intervals' starts each: cut at quantiles of a sample of about
    :data:`SAMPLE_ROWS` starts (where a slice begins changes no time, only what one slice holds)."""
    rows = int(source.scalar(f"SELECT count(*) FROM ({spans})"))
    pieces = -(-rows // SLICE_ROWS)
    if pieces <= 1:
        return [(None, None)]
    qs = ", ".join(str(k / pieces) for k in range(1, pieces))
    pct = min(100.0, 100.0 * SAMPLE_ROWS / rows)
    edges = source.scalar(f"SELECT quantile_disc(s, [{qs}]) FROM ({spans}) USING SAMPLE {pct:.6f}% (bernoulli)")
    cuts: list[int | None] = [None, *sorted({int(v) for v in edges or [] if v is not None}), None]
    return list(itertools.pairwise(cuts))


def _clip(column: str, bound: int | None, fn: str) -> str:
    return column if bound is None else f"{fn}({column}, {bound})"


class _Union:
    """The union of intervals that arrive sorted by start, batch after batch, and the time of it
    inside each scope's windows. The segment still open at the end of a batch is carried over."""

    def __init__(
        self,
        windows: Sequence[Segments],
        per_window: Sequence[bool] = (),
        segments: bool = False,
        counted: Sequence[bool] | None = None,
    ) -> None:
        self.windows = windows
        self.covered = np.zeros(len(windows), np.int64)
        # the scopes whose time is counted (None: all; the others' stays 0)
        self.counted = [counted is None or (k < len(counted) and bool(counted[k])) for k in range(len(windows))]
        # per scope that asks for it: the time in each of its windows
        self.per_window = [
            np.zeros(len(w[0]), np.int64) if k < len(per_window) and per_window[k] else None
            for k, w in enumerate(windows)
        ]
        self.open: tuple[int, int] | None = None  # (start, reach) of the segment not yet closed
        # the segments closed since the last take(), kept only where take() is asked for (``segments``):
        # else they would pile up for the whole sweep
        self.segments = segments
        self.closed: list[Segments] = []

    def add(self, s: I.I64, e: I.I64) -> None:
        n = len(s)
        if not n:
            return
        reach = np.maximum.accumulate(e)
        head = np.empty(n, np.bool_)  # where a segment starts: after every earlier interval ended
        if self.open is not None and s[0] <= self.open[1]:  # the open segment goes on into this batch
            np.maximum(reach, self.open[1], out=reach)
            head[0] = False
        else:
            head[0] = True
        np.greater(s[1:], reach[:-1], out=head[1:])
        heads = np.flatnonzero(head)
        starts, ends = s[heads], reach[heads[1:] - 1]  # the segments closed in this batch, but the last
        if self.open is not None:
            if head[0]:  # the open one closed before the batch
                starts, ends = np.r_[self.open[0], starts], np.r_[self.open[1], ends]
            elif len(heads):  # it closes at the batch's first head
                starts, ends = np.r_[self.open[0], starts], np.r_[reach[heads[0] - 1], ends]
            else:  # it covers the whole batch
                starts = np.array([self.open[0]], np.int64)
        self.open = (int(starts[-1]), int(reach[-1]))
        self._count(starts[:-1], ends)

    def take(self) -> Segments:
        """The segments closed since the last call, and the one still open as far as it reaches."""
        parts = [*self.closed, *([(np.array([self.open[0]]), np.array([self.open[1]]))] if self.open else [])]
        self.closed = []
        if not parts:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    def finish(self) -> I.I64:
        if self.open is not None:
            self._count(np.array([self.open[0]], np.int64), np.array([self.open[1]], np.int64))
            self.open = None
        return self.covered

    def _count(self, starts: I.I64, ends: I.I64) -> None:
        """Adds the time of the segments ``[starts, ends)`` (sorted, disjoint) inside each scope's
        windows: how much of them lies below each window's end, less below its start (a binary
        search per window edge among the segments, not per segment among the windows)."""
        if not len(starts):
            return
        if self.segments:
            self.closed.append((starts, ends))
        before = None  # the segments' running total, once for every scope
        for k, (ws, we) in enumerate(self.windows):
            if not self.counted[k]:
                continue
            # only the windows that overlap the segments: the others gain nothing from them
            lo, hi = int(np.searchsorted(we, starts[0], "right")), int(np.searchsorted(ws, ends[-1], "left"))
            if lo < hi:
                before = I.running_total(starts, ends) if before is None else before
                below = I.covered_below(starts, ends, np.concatenate([we[lo:hi], ws[lo:hi]]), before)
                each = below[: hi - lo] - below[hi - lo :]
                self.covered[k] += int(each.sum())
                mine = self.per_window[k]
                if mine is not None:
                    mine[lo:hi] += each


def _device_order(dev: object) -> tuple[int, str]:
    text = str(dev)
    return (0, f"{int(text):020d}") if text.lstrip("-").isdigit() else (1, text)
