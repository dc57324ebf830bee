"""GPU busy and idle time per device, and the idle time by cause, in one sorted pass over the time line.

Idle time goes to the first cause in a cascade: a GPU row is open (busy), else something was
queued, else the host synced, else it was in a CUDA call, else no cause the trace shows. The
time of each cause is the difference of nested unions: with B the GPU rows, Q the queued spans,
Y the syncs and A the CUDA calls, busy is |B|, queued |B u Q| - |B|, host sync
|B u Q u Y| - |B u Q|, and so on, each clipped to each scope's windows. DuckDB sorts a device's
intervals of all four sets by start; they come back a batch at a time, and each union is
merged as they pass (a running maximum of the ends: a new segment starts where an interval
starts after every earlier one ended), carried over from batch to batch. The time line is cut
into slices of about :data:`SLICE_ROWS` intervals (at quantiles of the starts), each sorted on
its own with its intervals clipped to it: a union's time is the sum of its time in each slice,
and no sort holds more than a slice, however long the trace. One pass for every scope together,
whatever the number of kernels and calls. The host's sets count for every device.
Definitions: :mod:`traceconv.analyses.idle`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from traceconv.analyses import intervals as I
from traceconv.analyses.results import DeviceTime, IdleBreakdown
from traceconv.analyses.source import Source

Segments = tuple[I.I64, I.I64]
GPU_ROWS = (
    "SELECT coalesce(CAST(device AS VARCHAR), 'unknown') AS dev, start_ns AS s, end_ns AS e FROM events "
    "WHERE kind IN ('kernel', 'memcpy', 'memset') AND start_ns IS NOT NULL AND end_ns IS NOT NULL"
)
QUEUED = (
    "SELECT coalesce(CAST(device AS VARCHAR), 'unknown') AS dev, launch_end_ns AS s, start_ns AS e FROM events "
    "WHERE kind IN ('kernel', 'memcpy', 'memset') AND start_ns IS NOT NULL AND end_ns IS NOT NULL "
    "AND launch_end_ns IS NOT NULL AND launch_end_ns < start_ns"
)
SETS = ("b", "q", "y", "a")  # GPU rows, queued spans, host syncs, host CUDA calls: the cascade's order
CAUSES = ("queued", "host_sync", "host_launch", "host_other")
BATCH_ROWS = 1 << 18  # intervals a batch of the sorted pass holds
SLICE_ROWS = 1 << 21  # intervals a slice of the time line holds (what one sort holds), about


def _spans(rows_sql: str, column: str, dev: bool = True) -> str:
    """``rows_sql``'s intervals (``dev``, s, e) of the set ``column``, with its place in :data:`SETS`."""
    key = "dev, " if dev else ""
    return f"SELECT {key}s, e, CAST({SETS.index(column)} AS UTINYINT) AS c FROM ({rows_sql})"


def sweep(
    source: Source, sync_sql: str, api_sql: str, windows: Sequence[Segments]
) -> list[tuple[dict[str, DeviceTime], IdleBreakdown]]:
    """For each scope's ``windows`` (sorted, disjoint segments): per device its busy time, idle time and
    the windows' length, and the idle time of all devices together split by cause."""
    source.table("device_spans", f"{_spans(GPU_ROWS, 'b')} UNION ALL {_spans(QUEUED, 'q')}")
    source.table("host_spans", f"{_spans(sync_sql, 'y', dev=False)} UNION ALL {_spans(api_sql, 'a', dev=False)}")
    devices = sorted(
        (str(d) for d in source.arrow("SELECT DISTINCT dev FROM device_spans WHERE c = 0")["dev"].to_pylist()),
        key=_device_order,
    )
    lengths = [int((e - s).sum()) for s, e in windows]
    spent = np.zeros((len(windows), 1 + len(CAUSES)), np.int64)  # per scope: busy, then the causes
    times: list[dict[str, DeviceTime]] = [{} for _ in windows]
    for dev in devices:
        per_dev = _one_device(source, dev, windows)
        for k, window_ns in enumerate(lengths):
            times[k][dev] = DeviceTime(
                busy_ns=int(per_dev[k, 0]), idle_ns=window_ns - int(per_dev[k, 0]), window_ns=window_ns
            )
        spent += per_dev
    source.run("DROP TABLE device_spans")
    source.run("DROP TABLE host_spans")
    return [
        (times[k], IdleBreakdown(**{c: int(spent[k, 1 + i]) for i, c in enumerate(CAUSES)}))
        for k in range(len(windows))
    ]


def _one_device(source: Source, dev: str, windows: Sequence[Segments]) -> np.ndarray:
    """Busy and idle-by-cause time of one device inside each scope's windows (a row per scope)."""
    quoted = dev.replace("'", "''")
    spans = (
        f"SELECT s, e, c FROM device_spans WHERE dev = '{quoted}' AND e > s "
        "UNION ALL SELECT s, e, c FROM host_spans WHERE e > s"
    )
    unions = [_Union(windows) for _ in SETS]  # B, B u Q, B u Q u Y, B u Q u Y u A
    for lo, hi in _slices(source, spans):
        inside = " AND ".join(
            ["true", *([f"e > {lo}"] if lo is not None else []), *([f"s < {hi}"] if hi is not None else [])]
        )
        clipped = (
            f"SELECT {_clip('s', lo, 'greatest')} AS s, {_clip('e', hi, 'least')} AS e, c "
            f"FROM (SELECT * FROM ({spans}) WHERE {inside}) ORDER BY s"
        )
        for batch in source.batches(clipped, BATCH_ROWS):
            if not batch.num_rows:
                continue
            s = batch.column(0).to_numpy().astype(np.int64)
            e = batch.column(1).to_numpy().astype(np.int64)
            c = batch.column(2).to_numpy()
            for level, union in enumerate(unions):
                keep = c <= level
                union.add(s[keep], e[keep])
    covered = np.stack([u.finish() for u in unions], axis=1)  # per scope: |U0|, |U1|, |U2|, |U3|
    lengths = np.array([int((we - ws).sum()) for ws, we in windows], np.int64)
    out = np.zeros((len(windows), 1 + len(CAUSES)), np.int64)
    out[:, 0] = covered[:, 0]
    out[:, 1:-1] = np.diff(covered, axis=1)
    out[:, -1] = lengths - covered[:, -1]
    return out


def _slices(source: Source, spans: str) -> list[tuple[int | None, int | None]]:
    """Consecutive slices of the time line, ``[lo, hi)`` (None: unbounded), of about
    :data:`SLICE_ROWS` of the intervals' starts each."""
    rows = int(source.scalar(f"SELECT count(*) FROM ({spans})"))
    pieces = -(-rows // SLICE_ROWS)
    if pieces <= 1:
        return [(None, None)]
    qs = ", ".join(str(k / pieces) for k in range(1, pieces))
    edges = source.scalar(f"SELECT approx_quantile(s, [{qs}]) FROM ({spans})")
    cuts: list[int | None] = [None, *sorted({int(v) for v in edges}), None]
    return list(itertools.pairwise(cuts))


def _clip(column: str, bound: int | None, fn: str) -> str:
    return column if bound is None else f"{fn}({column}, {bound})"


class _Union:
    """The union of intervals that arrive sorted by start, batch after batch, and the time of it
    inside each scope's windows. The segment still open at the end of a batch is carried over."""

    def __init__(self, windows: Sequence[Segments]) -> None:
        self.windows = windows
        self.covered = np.zeros(len(windows), np.int64)
        self.open: tuple[int, int] | None = None  # (start, reach) of the segment not yet closed

    def add(self, s: I.I64, e: I.I64) -> None:
        if not len(s):
            return
        if self.open is not None:
            s, e = np.r_[self.open[0], s], np.r_[self.open[1], e]
        reach = np.maximum.accumulate(e)
        heads = np.flatnonzero(np.r_[True, s[1:] > reach[:-1]])
        ends = reach[np.r_[heads[1:] - 1, len(s) - 1]]
        self.open = (int(s[heads[-1]]), int(ends[-1]))
        self._count(s[heads[:-1]], ends[:-1])

    def finish(self) -> I.I64:
        if self.open is not None:
            self._count(np.array([self.open[0]], np.int64), np.array([self.open[1]], np.int64))
            self.open = None
        return self.covered

    def _count(self, starts: I.I64, ends: I.I64) -> None:
        if not len(starts):
            return
        for k, (ws, we) in enumerate(self.windows):
            self.covered[k] += int((I.covered_below(ws, we, ends) - I.covered_below(ws, we, starts)).sum())


def _device_order(dev: object) -> tuple[int, str]:
    text = str(dev)
    return (0, f"{int(text):020d}") if text.lstrip("-").isdigit() else (1, text)
