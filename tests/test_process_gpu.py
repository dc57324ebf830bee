"""The GPU time a process launched while each NVTX range was open (``measure._process_gpu``: running
sums over time buckets plus the launches of the ends' own buckets) against a direct sum over every
launch of the process between the range's start and end, on real traces with NVTX ranges or
annotations, with buckets of 1 ns (every launch a bucket of its own), the default ones, and one
bucket for the whole trace."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from traceconv.analyses import measure as M
from traceconv.analyses import syncs as Y
from traceconv.analyses.common import load
from traceconv.analyses.prepare import INPUT_COLUMNS, prepare
from traceconv.analyses.source import Source

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
    table = load(fixture("nsys/h200/buggy.sqlite"), columns=INPUT_COLUMNS)
    for name in ("start_ns", "end_ns", "launch_start_ns"):
        rounded = pc.multiply(pc.divide(table[name], 100_000), 100_000)
        table = table.set_column(table.column_names.index(name), name, rounded)
    assert _compare(table, monkeypatch) > 0


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
