"""The busy sweep (analyses/busy.py) against an independent count over elementary intervals.

busy.py merges four nested unions as the sorted intervals pass, batch after batch. Here every
interval end and window edge cuts the time line into elementary pieces; a difference array says
how many intervals of each set cover each piece, and each piece goes to the first set of the
cascade that covers it. Real traces of both sources; small batches and slices so that unions are
carried across many batch and slice boundaries. Also: a query DuckDB runs out of memory for runs
once more on one thread, and the aggregate per host range that does runs in parts.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest

from traceconv.analyses import source as SRC
from traceconv.analyses.common import load
from traceconv.analyses.prepare import HOST_RANGES, INPUT_COLUMNS
from traceconv.analyses.source import Source
from traceconv.analyses.summary import as_dict, summarize
from traceconv.analyses.summary import measure as M
from traceconv.analyses.summary.attribution import leaves as L
from traceconv.analyses.summary.attribution import syncs as Y
from traceconv.analyses.summary.timeline import busy as B
from traceconv.errors import ResourceError

from .conftest import fixture

SYNC = (
    "SELECT start_ns AS s, end_ns AS e FROM sync_calls WHERE start_ns IS NOT NULL AND end_ns IS NOT NULL "
    # and the copy calls that returned after their own copy ended (synchronous in effect)
    "UNION ALL SELECT c.start_ns, c.end_ns FROM events c JOIN events m ON m.kind = 'memcpy' "
    "AND m.launch_event_id = c.event_id WHERE c.kind = 'cuda_api' AND c.end_ns >= m.end_ns AND m.end_ns >= c.start_ns"
)
API = f"SELECT start_ns AS s, end_ns AS e FROM ({HOST_RANGES}) WHERE kind = 'cuda_api' AND end_ns IS NOT NULL"
# The GPU rows and their queued spans, written here apart from busy.py's queries.
GPU_ROWS = (
    "SELECT coalesce(CAST(device AS VARCHAR), 'unknown') AS dev, start_ns AS s, end_ns AS e, "
    "CASE WHEN kind <> 'kernel' THEN 2 WHEN lower(name) LIKE '%nccl%' THEN 1 ELSE 0 END AS klass FROM events "
    "WHERE kind IN ('kernel', 'memcpy', 'memset') AND start_ns IS NOT NULL AND end_ns IS NOT NULL"
)
QUEUED = (
    "SELECT coalesce(CAST(device AS VARCHAR), 'unknown') AS dev, launch_end_ns AS s, start_ns AS e FROM events "
    "WHERE kind IN ('kernel', 'memcpy', 'memset') AND start_ns IS NOT NULL AND end_ns IS NOT NULL "
    "AND launch_end_ns IS NOT NULL AND launch_end_ns < start_ns"
)
TRACES = ("pytorch/h200/train_buggy.pt.trace.json.gz", "nsys/h200/buggy.sqlite", "pytorch/h200/streams_memcpy.json")


def _rows(source: Source, sql: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    t = source.arrow(f"SELECT * FROM ({sql}) WHERE s IS NOT NULL AND e IS NOT NULL AND e > s")
    dev = np.array([str(d) for d in t["dev"].to_pylist()]) if "dev" in t.column_names else np.array([])
    return dev, t["s"].to_numpy().astype(np.int64), t["e"].to_numpy().astype(np.int64)


def _windows(lo: int, hi: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The whole span, and seven disjoint windows inside it of uneven lengths (like steps)."""
    cuts = np.linspace(lo, hi, 16).astype(np.int64)
    steps = (cuts[1::2][:-1] + 7, cuts[2::2] - 3)
    return [(np.array([lo], np.int64), np.array([hi], np.int64)), (steps[0], steps[1])]


GAP_KINDS = ("queued", "sync", "launch", "host_api", "host_other")


def _gap_costs(
    a: np.ndarray, length: np.ndarray, cover: list[np.ndarray], inside: list[np.ndarray], launch_gap: int
) -> np.ndarray:
    """The idle gaps over elementary pieces: a run of pieces no GPU row covers is a gap, charged to the
    first set that covers its first piece (queued, sync, then a short gap is launch, a long one the host,
    in a CUDA call or not); the runs before the first and after the last GPU row have no end."""
    busy = cover[0]
    out = np.zeros((len(inside), len(GAP_KINDS)), np.int64)
    k = 0
    while k < len(a):
        if busy[k]:
            k += 1
            continue
        j = k
        while j < len(a) and not busy[j]:
            j += 1
        raw = int(length[k:j].sum()) if k > 0 and j < len(a) else np.iinfo(np.int64).max
        if cover[1][k]:
            kind = 0
        elif cover[2][k]:
            kind = 1
        elif raw < launch_gap:
            kind = 2
        else:
            kind = 3 if cover[3][k] else 4
        for w, ins in enumerate(inside):
            out[w, kind] += int(length[k:j][ins[k:j]].sum())
        k = j
    return out


def _independent(source: Source, windows: list[tuple[np.ndarray, np.ndarray]]) -> tuple[dict, list, list, np.ndarray]:
    rows = source.arrow(f"SELECT * FROM ({GPU_ROWS}) WHERE s IS NOT NULL AND e IS NOT NULL AND e > s")
    gdev = np.array([str(d) for d in rows["dev"].to_pylist()])
    gs, ge, gk = (rows[c].to_numpy().astype(np.int64) for c in ("s", "e", "klass"))
    each = np.zeros((len(windows[-1][0]), 3 + len(GAP_KINDS)), np.int64)  # the last scope's windows, one by one
    qdev, qs, qe = _rows(source, QUEUED)
    _, ys, ye = _rows(source, SYNC)
    _, as_, ae = _rows(source, API)
    busy: dict[str, list[int]] = {}
    causes = np.zeros((len(windows), 4), np.int64)
    gaps = np.zeros((len(windows), len(GAP_KINDS)), np.int64)
    for dev in sorted(set(gdev.tolist())):
        sets = [(gs[gdev == dev], ge[gdev == dev]), (qs[qdev == dev], qe[qdev == dev]), (ys, ye), (as_, ae)]
        edges = [np.concatenate([w[0], w[1]]) for w in windows]
        cuts = np.unique(np.concatenate([x for s, e in sets for x in (s, e)] + edges))
        a, b = cuts[:-1], cuts[1:]
        length = b - a
        cover = []
        for s, e in sets:
            diff = np.zeros(len(cuts) + 1, np.int64)
            np.add.at(diff, np.searchsorted(cuts, s), 1)
            np.add.at(diff, np.searchsorted(cuts, e), -1)
            cover.append(np.cumsum(diff)[: len(a)] > 0)
        first = np.select(cover, [0, 1, 2, 3], 4)
        busy[dev] = []
        insides = []
        for k, (ws, we) in enumerate(windows):
            inside = np.zeros(len(a), bool)
            for s, e in zip(ws, we, strict=True):
                inside |= (a >= s) & (b <= e)
            insides.append(inside)
            busy[dev].append(int(length[inside & (first == 0)].sum()))
            for c in range(4):
                causes[k, c] += int(length[inside & (first == c + 1)].sum())
        # the nested unions, as the sweep's cascade has them: B, B u Q, B u Q u Y, B u Q u Y u A
        nested = [np.logical_or.reduce(cover[: n + 1]) for n in range(4)]
        gaps += _gap_costs(a, length, nested, insides, B.LAUNCH_GAP_NS)
        # the last scope's windows one by one: the GPU rows by class (compute, then communication,
        # then copies where they overlap), then the gaps by kind
        by_class = []
        for k in range(3):
            mine = (gdev == dev) & (gk == k)
            diff = np.zeros(len(cuts) + 1, np.int64)
            np.add.at(diff, np.searchsorted(cuts, gs[mine]), 1)
            np.add.at(diff, np.searchsorted(cuts, ge[mine]), -1)
            by_class.append(np.cumsum(diff)[: len(a)] > 0)
        first_class = np.select(by_class, [0, 1, 2], 3)
        ws, we = windows[-1]
        one_by_one = [(a >= s) & (b <= e) for s, e in zip(ws, we, strict=True)]
        for w, inside in enumerate(one_by_one):
            for k in range(3):
                each[w, k] += int(length[inside & (first_class == k)].sum())
        each[:, 3:] += _gap_costs(a, length, nested, one_by_one, B.LAUNCH_GAP_NS)
    return busy, causes.tolist(), gaps.tolist(), each


@pytest.mark.parametrize(
    ("rows", "slice_rows", "held"),
    [
        (B.BATCH_ROWS, B.SLICE_ROWS, B.HELD_SLICES),
        (997, B.SLICE_ROWS, B.HELD_SLICES),
        (997, 2500, B.HELD_SLICES),
        (997, 2500, 0),
    ],
)
@pytest.mark.parametrize("rel", TRACES)
def test_the_sweep_equals_an_independent_count(
    rel: str, rows: int, slice_rows: int, held: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``held`` 0: every slice is too large to sort in numpy, and DuckDB sorts it (as a slice of
    starts that tie, which no cut splits)."""
    monkeypatch.setattr(B, "BATCH_ROWS", rows)
    monkeypatch.setattr(B, "SLICE_ROWS", slice_rows)
    monkeypatch.setattr(B, "HELD_SLICES", held)
    sorted_by_duckdb: list[str] = []
    batches = Source.batches

    def recorded(self: Source, sql: str, rows: int = 1 << 18) -> Any:
        if sql.endswith(" ORDER BY s"):
            sorted_by_duckdb.append(sql)
        return batches(self, sql, rows)

    monkeypatch.setattr(Source, "batches", recorded)
    slices: list[int] = []
    cut = B._slices

    def counted(*args: object) -> list[tuple[int | None, int | None]]:
        out = cut(*args)  # type: ignore[arg-type]
        slices.append(len(out))
        return out

    monkeypatch.setattr(B, "_slices", counted)
    with Source(load(fixture(rel), columns=INPUT_COLUMNS)) as source:
        Y.prepare_calls(source)
        Y.classify(source)  # the syncs classified: what the independent count reads
        lo, hi = source.arrow("SELECT min(start_ns) AS lo, max(end_ns) AS hi FROM events").to_pylist()[0].values()
        windows = _windows(int(lo), int(hi))
        want_busy, want_causes, want_gaps, want_each = _independent(source, windows)
        # what the summary's sweep reads, the last scope's windows also one by one
        got = B.sweep(source, Y.SYNC_SPANS, Y.API_SPANS, windows, per_window=[False, True])
    if slice_rows < B.SLICE_ROWS:
        assert max(slices) > 3  # the time line was cut into slices
    assert bool(sorted_by_duckdb) == (held == 0)
    assert sum(c for k in want_causes for c in k) > 0 and any(v[0] for v in want_busy.values())  # not vacuous
    assert all(sum(g) for g in want_gaps)  # not vacuous
    assert got[0].per_window is None and got[1].per_window is not None
    assert got[1].per_window.tolist() == want_each.tolist()
    assert want_each[:, :3].sum() > 0 and want_each[:, 3:].sum() > 0  # not vacuous
    for k, swept in enumerate(got):
        times, idle, gaps = swept.times, swept.idle, swept.gaps
        assert {d: t.busy_ns for d, t in times.items()} == {d: v[k] for d, v in want_busy.items()}
        assert [idle.queued, idle.host_sync, idle.host_launch, idle.host_other] == want_causes[k]
        assert [getattr(gaps, name) for name in GAP_KINDS] == want_gaps[k]
        assert sum(want_gaps[k]) == sum(t.idle_ns for t in times.values())  # every idle instant is in one gap
        for t in times.values():
            assert t.busy_ns + t.idle_ns == t.window_ns == int((windows[k][1] - windows[k][0]).sum())


def test_a_union_is_carried_across_batches() -> None:
    """A segment that one batch opens and the next extends or closes is counted once."""
    windows = [(np.array([0], np.int64), np.array([100], np.int64)), (np.array([0, 300]), np.array([100, 400]))]
    u = B._Union(windows)
    u.add(np.array([0, 5], np.int64), np.array([10, 20], np.int64))  # [0, 20) open at the batch's end
    u.add(np.array([15, 40], np.int64), np.array([30, 50], np.int64))  # extends it to 30; [40, 50) opens
    u.add(np.array([42, 44], np.int64), np.array([45, 48], np.int64))  # inside the open one: nothing closes
    u.add(np.array([45], np.int64), np.array([200], np.int64))  # clipped at 100
    u.add(np.array([350], np.int64), np.array([360], np.int64))  # closes [40, 200); only the second scope has it
    assert u.finish().tolist() == [30 + 60, 30 + 60 + 10]


class _OutOfMemoryOnce:
    """A DuckDB connection that runs out of memory the first ``times`` times a query counts rows."""

    def __init__(self, con: Any, times: int) -> None:
        self.con, self.left, self.threads_seen = con, times, []

    def execute(self, sql: str, *args: Any) -> Any:
        if "count(*)" in sql:
            self.threads_seen.append(self.con.execute("SELECT current_setting('threads')").fetchone()[0])
            if self.left:
                self.left -= 1
                raise duckdb.OutOfMemoryException("could not allocate block of size 256.0 KiB")
        return self.con.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.con, name)


def _budget(con: Any) -> str:
    return str(con.execute("SELECT current_setting('memory_limit')").fetchone()[0])


def _on_two_threads(source: Source) -> tuple[Any, Any]:
    """The Source on two threads; the rows of its events and its real connection."""
    source.threads = 2
    source.run("SET threads = 2")
    return source.scalar("SELECT count(*) FROM events"), source.con


def test_a_query_out_of_memory_runs_once_more_on_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """TRACECONV_MEMORY set: one thread, then the one-line error naming it; the budget stays."""
    monkeypatch.setattr(SRC, "MEMORY_LIMIT", "200MB")
    monkeypatch.setattr(SRC, "MEMORY_GROWS", False)
    with Source(load(fixture(TRACES[0]), columns=INPUT_COLUMNS)) as source:
        want, real = _on_two_threads(source)
        budget = _budget(real)
        source.con = flaky = _OutOfMemoryOnce(real, 1)
        assert source.scalar("SELECT count(*) FROM events") == want
        assert flaky.threads_seen == [2, 1]  # failed on two threads, then ran on one
        assert real.execute("SELECT current_setting('threads')").fetchone()[0] == 2  # and back to two
        source.con = _OutOfMemoryOnce(real, 2)  # out of memory on one thread too: the one-line error
        with pytest.raises(ResourceError, match="TRACECONV_MEMORY=200MB"):
            source.scalar("SELECT count(*) FROM events")
        source.con = real
        assert _budget(real) == budget


def test_the_default_budget_grows_where_a_query_does_not_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    """No TRACECONV_MEMORY: out of memory on two threads and on one, the query runs again with twice
    the budget, which stays for the queries after; at the ceiling, the one-line error."""
    monkeypatch.setattr(SRC, "MEMORY_LIMIT", "100MB")
    monkeypatch.setattr(SRC, "MEMORY_GROWS", True)
    monkeypatch.setattr(SRC, "GROWN_MAX_MB", 400)
    monkeypatch.setattr(SRC, "available_memory", lambda: 64 << 30)
    with Source(load(fixture(TRACES[0]), columns=INPUT_COLUMNS)) as source:
        want, real = _on_two_threads(source)
        small = _budget(real)
        source.con = flaky = _OutOfMemoryOnce(real, 2)
        assert source.scalar("SELECT count(*) FROM events") == want
        assert flaky.threads_seen == [2, 1, 2]  # two threads, one, then two with twice the budget
        assert source.memory == "200MB" and _budget(real) != small
        source.con = _OutOfMemoryOnce(real, 4)  # 200MB on two threads and one, then 400MB likewise
        with pytest.raises(ResourceError, match="400MB of memory"):
            source.scalar("SELECT count(*) FROM events")
        source.con = real
        assert source.memory == "400MB"


@pytest.mark.parametrize("rel", ["nsys/h200/buggy.sqlite", "pytorch/h200/train_buggy.pt.trace.json.gz"])
def test_the_aggregate_per_host_range_in_parts_is_the_whole(rel: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the aggregate per host range runs out of memory whole, it runs in parts: the same summary.
    (The aggregate of the sorted stream's path: where the calls are leaves, numpy sums the ranges.)"""
    monkeypatch.setattr(L, "RATIO", 10**18)
    table = load(fixture(rel), columns=INPUT_COLUMNS)
    whole = as_dict(summarize(table), 0)
    tried: list[str] = []
    real = Source.table

    def short_of_memory(self: Source, name: str, sql: str, params: Any = None) -> None:
        if name == "tree_gpu_sums":
            tried.append(sql)
            if " % " not in sql:
                raise ResourceError(None, "the analysis needs more than TRACECONV_MEMORY", "set it higher")
        real(self, name, sql, params)

    monkeypatch.setattr(M, "PARTS", (1, 5))
    monkeypatch.setattr(Source, "table", short_of_memory)
    assert as_dict(summarize(table), 0) == whole
    assert len(tried) == 2 and " % 5 " in tried[1]  # whole (refused), then the first of five parts
    assert whole["top_ops"] or whole["nvtx"]  # the trees had GPU time to attribute


class _WholeSumsOutOfMemory:
    """A DuckDB connection on which the aggregate per host range never fits whole."""

    def __init__(self, con: Any, seen: list[str]) -> None:
        self.con, self.seen = con, seen

    def execute(self, sql: str, *args: Any) -> Any:
        if "TABLE tree_gpu_sums AS" in sql and " % " not in sql:
            self.seen.append(_budget(self.con))
            raise duckdb.OutOfMemoryException("could not allocate block of size 256.0 KiB")
        return self.con.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.con, name)


def test_the_aggregate_runs_in_parts_before_the_budget_grows(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default budget grows only where no leaner way is left: the aggregate per host range
    that does not fit whole runs in parts within the same budget, which stays as it was."""
    monkeypatch.setattr(SRC, "MEMORY_LIMIT", "100MB")
    monkeypatch.setattr(SRC, "MEMORY_GROWS", True)
    monkeypatch.setattr(M, "PARTS", (1, 5))
    monkeypatch.setattr(L, "RATIO", 10**18)  # the sorted stream's path, whose aggregate this is
    table = load(fixture("nsys/h200/buggy.sqlite"), columns=INPUT_COLUMNS)
    whole = as_dict(summarize(table), 0)
    seen: list[str] = []
    sources: list[Source] = []
    real_init = Source.__init__

    def init(self: Source, *args: Any, **kwargs: Any) -> None:
        real_init(self, *args, **kwargs)
        self.con = _WholeSumsOutOfMemory(self.con, seen)
        sources.append(self)

    monkeypatch.setattr(Source, "__init__", init)
    assert as_dict(summarize(table), 0) == whole
    assert len(seen) == 2 and len(set(seen)) == 1  # refused whole on two threads and one, at one budget
    assert [s.memory for s in sources] == ["100MB"]  # the parts ran within it: it never grew


def test_the_default_budget_grows_within_half_the_available_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(SRC, "MEMORY_LIMIT", "100MB")
    monkeypatch.setattr(SRC, "MEMORY_GROWS", True)
    monkeypatch.setattr(SRC, "available_memory", lambda: 500 * 10**6)  # half of it: 250 MB
    with Source(load(fixture(TRACES[0]), columns=INPUT_COLUMNS)) as source:
        _, real = _on_two_threads(source)
        # 100MB on two threads and one, 200MB likewise, then the ceiling itself (not twice 200MB)
        source.con = _OutOfMemoryOnce(real, 6)
        with pytest.raises(ResourceError, match="250MB of memory"):
            source.scalar("SELECT count(*) FROM events")
        source.con = real
        assert source.memory == "250MB"


@pytest.mark.parametrize(("value", "code"), [("", 0), ("64MB", 0), ("abc", 2), ("12 parsecs", 2), ("'1GB", 2)])
def test_the_budget_a_user_sets(value: str, code: int, tmp_path: Path) -> None:
    """TRACECONV_MEMORY set but empty is the default; a value that is no memory size is a one-line error
    that names it, no traceback."""
    env = {**os.environ, "TRACECONV_MEMORY": value}
    trace = fixture("pytorch/h200/seed_linear.json")
    done = subprocess.run(
        [sys.executable, "-c", "from traceconv.cli import main; main()", "kernels", str(trace)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == code, done.stderr
    if code:
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "TRACECONV_MEMORY=" in lines[0] and "is not a memory size" in lines[0], lines
    else:
        assert "sgemm" in done.stdout, done.stdout  # the trace's kernels
