"""An input's GPU work over time and by class, aggregated before anything is drawn.

A *lane* is one GPU of one rank (the rank is null for a single-process trace). Its work falls in
three classes: **compute** (kernels), **communication** (NCCL/RCCL kernels) and **copies**
(memcpy, memset). :func:`breakdown` splits each lane's time inside the scope's windows (the
steps, else the profiled window) exclusively, in that order of precedence: time while any compute
kernel runs is compute; else while a collective runs, communication; else while a copy runs,
copies; the rest is idle. The four add up to the windows' length.

:func:`series` cuts the window into ``buckets`` equal buckets: each lane's busy share (the union
of its GPU rows, clipped to the bucket), the copy throughput per direction (bytes by the copy's
start), the allocator's total per device (the largest in the bucket; the peak exactly), and GPU
metrics samples (mean per bucket). :func:`histograms` bins kernels' execution and queue times by
tenths of a decade. Aggregation is SQL; the unions are numpy over one lane's start/end columns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from traceconv.analyses import intervals as I
from traceconv.analyses.source import Source
from traceconv.analyses.summary.scopes import GpuWindows

CLASSES = ("compute", "communication", "copies")
# NCCL/RCCL kernels: ncclDevKernel_AllReduce_..., void ncclKernel_..., rccl...
COLLECTIVE = "regexp_matches(lower(coalesce(name, '')), '^(void )?(nccl|rccl)')"
LANE = "coalesce(rank, -1) AS rank, coalesce(CAST(device AS VARCHAR), 'unknown') AS dev"
GPU_WORK = "kind IN ('kernel', 'memcpy', 'memset', 'graph') AND start_ns IS NOT NULL AND end_ns IS NOT NULL"
BUCKETS = 400
MAX_STEPS = 500  # steps shown one by one


@dataclass(frozen=True)
class Breakdown:
    """One lane in one scope: its time by class (exclusive, see the module) and the scope's length."""

    label: str
    rank: int | None
    device: str
    compute_ns: int
    communication_ns: int
    copies_ns: int
    idle_ns: int
    window_ns: int
    steps: int  # how many steps the scope holds (1 for a window without steps)
    step: int | None = None  # which step (from 0), for one step's breakdown


@dataclass(frozen=True)
class Series:
    """One line of a chart over time: ``y`` per bucket (None where there is no sample)."""

    name: str
    unit: str
    y: list[float | None]


@dataclass(frozen=True)
class Timeline:
    start_ns: int
    bucket_ns: int
    buckets: int
    utilisation: list[Series]  # % busy per lane
    copies: list[Series]  # GB/s per copy direction
    memory: list[Series]  # MiB allocated / reserved per device
    metrics: list[Series]  # GPU metrics samples in %, mean per bucket

    @property
    def x_ms(self) -> list[float]:
        """Each bucket's middle, in ms since the window's start."""
        return [round((k + 0.5) * self.bucket_ns / 1e6, 6) for k in range(self.buckets)]


@dataclass(frozen=True)
class Histogram:
    """Counts per bin of log10(ns) in tenths: ``lo_ns[k]`` is bin k's lower edge."""

    name: str
    lo_ns: list[float]
    counts: list[int]


def lanes(source: Source) -> list[tuple[int, str]]:
    """The (rank, device) pairs that ran GPU work, rank -1 where the trace does not say."""
    rows = source.arrow(f"SELECT DISTINCT {LANE} FROM events WHERE {GPU_WORK} ORDER BY 1, 2").to_pylist()
    return [(int(r["rank"]), str(r["dev"])) for r in rows]


def lane_label(rank: int, dev: str, several_ranks: bool) -> str:
    gpu = f"GPU {dev}" if dev != "unknown" else "GPU ?"
    return f"rank {rank} · {gpu}" if several_ranks and rank >= 0 else gpu


def _lane_rows(source: Source, rank: int, dev: str) -> dict[str, tuple[I.I64, I.I64]]:
    """One lane's GPU rows as the union of each class (compute, communication, copies)."""
    table = source.arrow(
        f"SELECT CASE WHEN kind <> 'kernel' THEN 2 WHEN {COLLECTIVE} THEN 1 ELSE 0 END AS c, start_ns, end_ns "
        f"FROM events WHERE {GPU_WORK} AND coalesce(rank, -1) = ? AND coalesce(CAST(device AS VARCHAR), 'unknown') = ?",
        [rank, dev],
    )
    c = table["c"].to_numpy()
    s = table["start_ns"].to_numpy().astype(np.int64)
    e = table["end_ns"].to_numpy().astype(np.int64)
    return {name: I.union(s[c == k], e[c == k]) for k, name in enumerate(CLASSES)}


def _inside(segments: tuple[I.I64, I.I64], ws: I.I64, we: I.I64) -> int:
    """How much of the sorted, disjoint ``segments`` lies inside the sorted, disjoint windows."""
    return int((I.covered_below(*segments, we) - I.covered_below(*segments, ws)).sum())


def _merged(*parts: tuple[I.I64, I.I64]) -> tuple[I.I64, I.I64]:
    return I.union(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))


def breakdown(source: Source, windows: GpuWindows, steps: int = 1) -> list[Breakdown]:
    """Each lane's time inside its windows (a scope's GPU windows) by class, exclusive (see the module)."""
    return [b for per_lane in _by_lane(source, lambda dev: [windows.of(dev)], steps, False) for b in per_lane]


def step_breakdown(source: Source, step_start: I.I64, step_end: I.I64, most: int = MAX_STEPS) -> list[Breakdown]:
    """Each lane's breakdown in each step (the first ``most`` steps), ``step`` numbering them from 0."""
    order = np.argsort(step_start, kind="stable")[:most]
    windows = [(step_start[k : k + 1], step_end[k : k + 1]) for k in order]
    return [b for per_lane in _by_lane(source, lambda dev: windows, 1, True) for b in per_lane]


def _by_lane(
    source: Source, windows: Callable[[str], Sequence[tuple[I.I64, I.I64]]], steps: int, numbered: bool
) -> list[list[Breakdown]]:
    """For each lane, its breakdown in each of its ``windows`` (sorted, disjoint segments each)."""
    found = lanes(source)
    several = len({rank for rank, _ in found}) > 1
    out = []
    for rank, dev in found:
        u = _lane_rows(source, rank, dev)
        compute = u["compute"]
        with_comm = _merged(compute, u["communication"])
        busy = _merged(with_comm, u["copies"])
        parts = []
        for k, (ws, we) in enumerate(windows(dev)):
            c, cc, b = (_inside(x, ws, we) for x in (compute, with_comm, busy))
            total = int((we - ws).sum())
            label = lane_label(rank, dev, several)
            parts.append(
                Breakdown(
                    label,
                    rank if rank >= 0 else None,
                    dev,
                    c,
                    cc - c,
                    b - cc,
                    total - b,
                    total,
                    steps,
                    k if numbered else None,
                )
            )
        out.append(parts)
    return out


def series(source: Source, window: tuple[int, int], buckets: int = BUCKETS) -> Timeline:
    """The window's buckets: busy share per lane, copy throughput, memory, GPU metrics (see the module)."""
    lo, hi = window
    width = max(1, -(-(hi - lo) // max(1, buckets)))
    n = max(1, min(buckets, -(-(hi - lo) // width))) if hi > lo else 1
    edges = lo + width * np.arange(n + 1, dtype=np.int64)
    found = lanes(source)
    several = len({rank for rank, _ in found}) > 1
    util = []
    for rank, dev in found:
        u = _lane_rows(source, rank, dev)
        covered = np.diff(I.covered_below(*_merged(*u.values()), edges))
        util.append(Series(lane_label(rank, dev, several), "%", _rounded(covered * 100.0 / width)))
    memory = _memory(source, lo, width, n)
    return Timeline(
        start_ns=lo,
        bucket_ns=width,
        buckets=n,
        utilisation=util,
        copies=_copies(source, lo, width, n),
        memory=memory,
        metrics=_metrics(source, lo, width, n),
    )


def _bucket(lo: int, width: int, n: int, column: str = "start_ns") -> str:
    return f"least(greatest(({column} - {lo}) // {width}, 0), {n - 1})"


def _filled(rows: Sequence[dict[str, Any]], key: str, value: str, n: int) -> dict[str, list[float | None]]:
    """Rows of (key, b, value) as one list of n values per key (None where a bucket has no row)."""
    out: dict[str, list[float | None]] = {}
    for r in rows:
        line = out.setdefault(str(r[key]), [None] * n)
        v = r[value]
        line[int(r["b"])] = None if v is None else round(float(v), 4)
    return out


def _copies(source: Source, lo: int, width: int, n: int) -> list[Series]:
    rows = source.arrow(
        f"SELECT coalesce(copy_kind, 'Unknown') AS k, {_bucket(lo, width, n)} AS b, sum(bytes) / {width} AS gbps "
        f"FROM events WHERE kind = 'memcpy' AND start_ns IS NOT NULL AND bytes IS NOT NULL GROUP BY ALL ORDER BY 1, 2"
    ).to_pylist()
    return [Series(k, "GB/s", [v or 0.0 for v in y]) for k, y in _filled(rows, "k", "gbps", n).items()]


def _memory(source: Source, lo: int, width: int, n: int) -> list[Series]:
    """Allocated and reserved MB per device and bucket (the largest total in each); each device's peak
    is the summary's (:mod:`traceconv.analyses.memory`), not worked out again here."""
    where = "kind = 'memory' AND start_ns IS NOT NULL AND total_allocated_bytes IS NOT NULL"
    dev = "coalesce(CAST(device AS VARCHAR), 'cpu')"
    rows = source.arrow(
        f"SELECT {dev} AS d, {_bucket(lo, width, n)} AS b, max(total_allocated_bytes) / 1e6 AS a, "
        f"max(total_reserved_bytes) / 1e6 AS r FROM events WHERE {where} GROUP BY ALL ORDER BY 1, 2"
    ).to_pylist()
    out = [Series(f"{_device(d)} allocated", "MB", y) for d, y in _filled(rows, "d", "a", n).items()]
    out += [Series(f"{_device(d)} reserved", "MB", y) for d, y in _filled(rows, "d", "r", n).items() if any(y)]
    return out


def _device(dev: str) -> str:
    return "host" if dev in ("cpu", "-1") else f"GPU {dev}"


def _metrics(source: Source, lo: int, width: int, n: int) -> list[Series]:
    """GPU metrics in % (SM activity, warps in flight, DRAM ...), mean per bucket; all-zero ones left out."""
    if not {"value", "unit"} <= _columns(source):
        return []
    rows = source.arrow(
        f"SELECT name || coalesce(' · GPU ' || CAST(device AS VARCHAR), '') AS k, {_bucket(lo, width, n)} AS b, "
        "avg(value) AS v FROM events WHERE kind = 'metric' AND unit = '%' AND value IS NOT NULL "
        "AND start_ns IS NOT NULL GROUP BY ALL ORDER BY 1, 2"
    ).to_pylist()
    return [Series(k, "%", y) for k, y in _filled(rows, "k", "v", n).items() if any(y)]


def _columns(source: Source) -> set[str]:
    """The columns the view really has (Parquet files of an older reader lack the newer ones)."""
    return {str(c) for c in source.arrow("SELECT column_name FROM (DESCRIBE events)")["column_name"].to_pylist()}


def histograms(source: Source) -> list[Histogram]:
    """Kernels' execution and queue times, counted per tenth of a decade of nanoseconds."""
    out = []
    for name, column in (("execution", "dur_ns"), ("queue", "queue_ns")):
        rows = source.arrow(
            f"SELECT floor(log10(greatest({column}, 1)) * 10) AS b, count(*) AS n FROM events "
            f"WHERE kind = 'kernel' AND {column} IS NOT NULL GROUP BY 1 ORDER BY 1"
        ).to_pylist()
        out.append(Histogram(name, [round(10 ** (r["b"] / 10), 1) for r in rows], [int(r["n"]) for r in rows]))
    return out


def _rounded(values: np.ndarray) -> list[float | None]:
    return [round(float(v), 3) for v in values]
