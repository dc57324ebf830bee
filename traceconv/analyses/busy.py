"""GPU busy and idle time per device, and the idle time by cause, in one sweep over the time line.

Every interval of every set (a device's GPU rows, its queued spans, the host's syncs and CUDA
calls) becomes two points, +1 at its start and -1 at its end. DuckDB sorts a device's points by
time (within its memory budget); they come back a batch at a time, and running sums say between
each point and the next how many intervals of each set are open. That stretch, clipped to each
scope's windows, is busy where a GPU row is open; else idle while something was queued, else
while the host synced, else while it was in a CUDA call, else for no cause the trace shows. One
sort and one pass for every scope together, whatever the number of kernels and calls. The
host's sets count for every device. Definitions: :mod:`traceconv.analyses.idle`.
"""

from __future__ import annotations

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


def _points(rows_sql: str, column: str, dev: bool = True) -> str:
    """+1/-1 points of ``rows_sql``'s intervals (``dev``, s, e) of the set ``column``: the time and one
    code, the set's place in :data:`SETS` times two, plus one for an end."""
    code = SETS.index(column) * 2
    key = "dev, " if dev else ""
    return (
        f"SELECT {key}s AS t, CAST({code} AS UTINYINT) AS c FROM ({rows_sql}) WHERE e > s "
        f"UNION ALL SELECT {key}e AS t, CAST({code + 1} AS UTINYINT) AS c FROM ({rows_sql}) WHERE e > s"
    )


def sweep(
    source: Source, sync_sql: str, api_sql: str, windows: Sequence[Segments]
) -> list[tuple[dict[str, DeviceTime], IdleBreakdown]]:
    """For each scope's ``windows`` (sorted, disjoint segments): per device its busy time, idle time and
    the windows' length, and the idle time of all devices together split by cause."""
    source.table("device_points", f"{_points(GPU_ROWS, 'b')} UNION ALL {_points(QUEUED, 'q')}")
    source.table("host_points", f"{_points(sync_sql, 'y', dev=False)} UNION ALL {_points(api_sql, 'a', dev=False)}")
    devices = sorted(
        (str(d) for d in source.arrow(f"SELECT DISTINCT dev FROM ({GPU_ROWS})")["dev"].to_pylist()),
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
    return [
        (times[k], IdleBreakdown(**{c: int(spent[k, 1 + i]) for i, c in enumerate(CAUSES)}))
        for k in range(len(windows))
    ]


def _one_device(source: Source, dev: str, windows: Sequence[Segments]) -> np.ndarray:
    """Busy and idle-by-cause time of one device inside each scope's windows (a row per scope)."""
    quoted = dev.replace("'", "''")
    batches = source.batches(
        f"SELECT t, c FROM device_points WHERE dev = '{quoted}' UNION ALL SELECT t, c FROM host_points ORDER BY t"
    )
    out = np.zeros((len(windows), 1 + len(CAUSES)), np.int64)
    state = np.zeros(len(SETS), np.int64)  # open intervals of each set before the batch
    last_t: int | None = None  # the previous batch's last point: where its open stretch starts
    first_t: int | None = None
    for batch in batches:
        t = batch.column(0).to_numpy().astype(np.int64)
        if not len(t):
            continue
        code = batch.column(1).to_numpy().astype(np.int64)
        deltas = np.zeros((len(t), len(SETS)), np.int64)
        deltas[np.arange(len(t)), code >> 1] = 1 - 2 * (code & 1)
        if last_t is None:
            first_t = int(t[0])
            starts, ends, open_ = t[:-1], t[1:], np.cumsum(deltas, axis=0)[:-1] + state
        else:
            starts = np.r_[last_t, t[:-1]]
            ends = t
            open_ = np.vstack([state, np.cumsum(deltas, axis=0)[:-1] + state])
        state = state + deltas.sum(axis=0)
        last_t = int(t[-1])
        out += _attributed(starts, ends, open_, windows)
    for k, (s, e) in enumerate(windows):  # before the first point and after the last: idle, no cause
        inside = 0
        if first_t is not None and last_t is not None:
            edges = I.covered_below(s, e, np.array([first_t, last_t], np.int64))
            inside = int(edges[1] - edges[0])
        out[k, -1] += int((e - s).sum()) - inside
    return out


def _attributed(starts: I.I64, ends: I.I64, open_: np.ndarray, windows: Sequence[Segments]) -> np.ndarray:
    """The stretches' time inside each scope's windows, by the first set open in the cascade."""
    busy = open_[:, 0] > 0
    queued = ~busy & (open_[:, 1] > 0)
    synced = ~busy & ~queued & (open_[:, 2] > 0)
    launching = ~busy & ~queued & ~synced & (open_[:, 3] > 0)
    other = ~busy & ~queued & ~synced & ~launching
    masks = (busy, queued, synced, launching, other)
    out = np.zeros((len(windows), len(masks)), np.int64)
    for k, (s, e) in enumerate(windows):
        inside = I.covered_below(s, e, ends) - I.covered_below(s, e, starts)
        out[k] = [int(inside[m].sum()) for m in masks]
    return out


def _device_order(dev: object) -> tuple[int, str]:
    text = str(dev)
    return (0, f"{int(text):020d}") if text.lstrip("-").isdigit() else (1, text)
