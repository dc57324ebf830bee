"""The GPU time a process launched while each NVTX range was open against a direct sum over every
launch of the process between the range's start and end, on real traces with NVTX ranges or
annotations. ``measure._process_gpu`` (running sums over time buckets plus the launches of the
ends' own buckets) with buckets of 1 ns (every launch a bucket of its own), the default ones, and
one bucket for the whole trace; ``leaf_gpu.gpu_pass`` (where the calls are leaves: each batch of
launches sorted and summed up to the ranges' ends) with one batch and batches of 997 rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from traceconv.analyses.common import load
from traceconv.analyses.prepare import HOST_RANGES, INPUT_COLUMNS, prepare
from traceconv.analyses.source import Source
from traceconv.analyses.summary import measure as M
from traceconv.analyses.summary.attribution import leaf_gpu as LG
from traceconv.analyses.summary.attribution import leaves as L
from traceconv.analyses.summary.attribution import syncs as Y

from .conftest import fixture, fixture_files

TRACES = [
    *fixture_files("nsys/h200", ["buggy.sqlite", "fixed.sqlite", "autograd_nvtx.sqlite"]),
    *fixture_files("pytorch/h200", ["train_buggy.pt.trace.json.gz", "conv_nvtx_stack.json", "ddp_rank0.pt.trace.json"]),
]
BUCKETS = (1, M.LAUNCH_BUCKET_NS, 1 << 62)
DIRECT = (
    "WITH launches AS (SELECT c.tc, rl.pid, g.launch_start_ns AS t, coalesce(g.dur_ns, 0) AS d FROM events g "
    "JOIN trace_codes c ON c.trace_id = coalesce(g.trace_id, '') "
    "JOIN tree_ranges rl ON rl.tc = c.tc AND rl.event_id = g.launch_event_id "
    "WHERE g.kind IN ('kernel', 'memcpy', 'memset') AND g.launch_start_ns IS NOT NULL) "
    "SELECT r.tc, r.event_id, CAST(coalesce(sum(l.d), 0) AS BIGINT) AS process_gpu FROM tree_ranges r "
    "LEFT JOIN launches l ON l.tc = r.tc AND l.pid = r.pid AND l.t BETWEEN r.start_ns AND r.end_ns "
    "WHERE r.kind = 1 GROUP BY ALL"
)


def _sums(source: Source, sql: str) -> dict[tuple[int, int], int]:
    t = source.arrow(sql)
    keys = zip(t["tc"].to_pylist(), t["event_id"].to_pylist(), strict=True)
    return dict(zip(keys, t["process_gpu"].to_pylist(), strict=True))


@pytest.mark.parametrize("path", TRACES, ids=lambda p: Path(p).name)
def test_process_gpu_equals_a_direct_sum(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _compare(load(path, columns=INPUT_COLUMNS), monkeypatch) > 0  # the sums are tested, not only zeros


def test_launches_at_the_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hand-made from a real trace: every time rounded to 100 us, so that launches start at the very
    nanosecond that ranges start or end (a sum taken up to an end must hold them)."""
    assert _compare(_rounded(load(fixture("nsys/h200/buggy.sqlite"), columns=INPUT_COLUMNS)), monkeypatch) > 0


def _rounded(table: pa.Table) -> pa.Table:
    for name in ("start_ns", "end_ns", "launch_start_ns"):
        rounded = pc.multiply(pc.divide(table[name], 100_000), 100_000)
        table = table.set_column(table.column_names.index(name), name, rounded)
    return table


def _compare(table: pa.Table, monkeypatch: pytest.MonkeyPatch) -> int:
    """Compares at every bucket width; how many ranges launched GPU work."""
    launched = 0
    for width in BUCKETS:
        monkeypatch.setattr(M, "LAUNCH_BUCKET_NS", width)
        with Source(table) as source:
            facts = prepare(source)
            Y.prepare_calls(source)
            Y.classify(source)
            M.tree_stream(source, facts)
            got = _sums(source, "SELECT * FROM tree_process")
            assert got == _sums(source, DIRECT), width
            launched = sum(1 for v in got.values() if v > 0)
    return launched


# The same sums where the calls are leaves (``leaf_gpu.gpu_pass``, in numpy): a launch's process is its
# call's, which ``tree_ranges`` then leaves out, so the direct sum finds it among every host range.
DIRECT_CALLS = (
    f"WITH hosts AS (SELECT trace_id, event_id, pid FROM ({HOST_RANGES})), "
    "launches AS (SELECT c.tc, h.pid, g.launch_start_ns AS t, coalesce(g.dur_ns, 0) AS d FROM events g "
    "JOIN trace_codes c ON c.trace_id = coalesce(g.trace_id, '') "
    "JOIN hosts h ON h.trace_id = c.trace_id AND h.event_id = g.launch_event_id "
    "WHERE g.kind IN ('kernel', 'memcpy', 'memset') AND g.launch_start_ns IS NOT NULL) "
    "SELECT r.tc, r.event_id, CAST(coalesce(sum(l.d), 0) AS BIGINT) AS process_gpu FROM tree_ranges r "
    "LEFT JOIN launches l ON l.tc = r.tc AND l.pid = r.pid AND l.t BETWEEN r.start_ns AND r.end_ns "
    "WHERE r.kind = 1 GROUP BY ALL"
)


@pytest.mark.parametrize("batch", [LG.GPU_BATCH, 997])
@pytest.mark.parametrize("path", TRACES, ids=lambda p: Path(p).name)
def test_process_gpu_of_leaf_calls_equals_a_direct_sum(path: Path, batch: int, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _compare_leaves(load(path, columns=INPUT_COLUMNS), batch, monkeypatch) > 0


def test_leaf_sums_hold_launches_at_a_range_s_very_ends() -> None:
    """Hand-made (the real exports that take the calls as leaves launch nothing at the very nanosecond
    that a range starts or ends, and no range ends before it starts): ``leaf_gpu.Ranges`` against the
    SQL's definition (the launches up to the end less those before the start: for a range that ends
    before it starts, minus those between), launches of two processes and of none of the ranges' in
    batches of every size, some in reverse time order."""
    rng = np.random.default_rng(7)
    starts = np.array([100, 150, 100, 120, 400, 300], np.int64)
    ends = starts + np.array([100, 0, 200, 5, 0, -50], np.int64)  # the last ends before it starts
    ranges = {"event_id": [1, 2, 3, 4, 5, 6], "pid": [7, 7, 8, 7, 8, 7], "start_ns": starts, "end_ns": ends}
    times = np.r_[np.arange(90, 420, 5), starts, ends]  # every start and end is a launch
    pid = rng.choice([7, 8, 9], len(times))
    d = rng.integers(1, 1000, len(times))

    def upto(p: int, t: int) -> int:
        return int(d[(pid == p) & (times <= t)].sum())

    want = {
        int(e): upto(p, t) - upto(p, s - 1)
        for e, p, s, t in zip(ranges["event_id"], ranges["pid"], starts.tolist(), ends.tolist(), strict=True)
    }
    assert all(want.values()) and want[6] < 0  # every range holds a launch; the last, minus some
    for size in (1, 3, 17, len(times)):
        got = LG.Ranges(pa.table(ranges))
        for at in range(0, len(times), size):
            part = slice(at, at + size)
            got.add(pid[part][::-1], times[part][::-1], d[part][::-1])
        table = got.table()
        assert dict(zip(table["event_id"].to_pylist(), table["process_gpu"].to_pylist(), strict=True)) == want


def _compare_leaves(table: pa.Table, batch: int, monkeypatch: pytest.MonkeyPatch) -> int:
    """Compares with the calls taken as leaves, ``batch`` GPU rows at a time; how many ranges launched GPU work."""
    monkeypatch.setattr(LG, "GPU_BATCH", batch)
    monkeypatch.setattr(L, "RATIO", 0)  # the calls as leaves wherever they can be
    monkeypatch.setattr(L, "MOST_STRUCTURE", 10**9)
    with Source(table) as source:
        facts = prepare(source)
        Y.prepare_calls(source)
        calls = L.scan(source, facts, M.trace_codes(source), Y.blocking_ids(source))
        assert calls is not None  # every trace here has calls that are leaves
        Y.classify(source, calls.previous_calls())
        M.tree_stream(source, facts, calls)
        got = _sums(source, "SELECT * FROM tree_process")
        assert got == _sums(source, DIRECT_CALLS)
    return sum(1 for v in got.values() if v > 0)
