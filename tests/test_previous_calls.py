"""The call before each blocking call on its thread (``syncs._previous_calls``: searched in time
buckets that widen until found) equals a window over every call in (start, end, event id) order,
on real traces of both sources, with buckets so narrow that nearly every search widens many times,
the default ones, and one bucket for the whole trace; and on a hand-made variant of a real trace
whose calls share start times (ties broken by end, then event id). Where the calls are leaves, the
calls' pass finds them instead (``leaves.scan``): the same, on the same real traces."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from traceconv.analyses import summary as SM
from traceconv.analyses.common import load
from traceconv.analyses.prepare import HOST_RANGES, INPUT_COLUMNS
from traceconv.analyses.source import Source
from traceconv.analyses.summary import measure as M
from traceconv.analyses.summary.attribution import leaves as L
from traceconv.analyses.summary.attribution import syncs as Y

from .conftest import fixture, fixture_files

CALLS = f"SELECT *, hash(trace_id, pid, tid) AS thread FROM ({HOST_RANGES}) WHERE kind = 'cuda_api'"
WINDOW = (
    "SELECT w.thread, w.event_id, w.prev_id, w.prev_dur FROM (SELECT thread, event_id, "
    f"lag(event_id) OVER t AS prev_id, lag(dur_ns) OVER t AS prev_dur FROM ({CALLS}) "
    "WINDOW t AS (PARTITION BY thread ORDER BY start_ns, coalesce(end_ns, 0), event_id)) w "
    "SEMI JOIN blocking_calls b ON b.thread = w.thread AND b.event_id = w.event_id WHERE w.prev_id IS NOT NULL"
)
TRACES = [
    *fixture_files("nsys/h200", ["buggy.sqlite", "fixed.sqlite"]),
    *fixture_files("nsys/public", ["*.sqlite"]),
    *fixture_files("pytorch/h200", ["train_buggy.pt.trace.json.gz", "streams_memcpy.json", "seed_linear.json"]),
]
BUCKETS = (1, Y.FIRST_BUCKET_NS, 1 << 62)


def _pairs(source: Source, sql: str) -> set[tuple[int, int, int, int | None]]:
    t = source.arrow(sql)
    return set(zip(*(t[c].to_pylist() for c in ("thread", "event_id", "prev_id", "prev_dur")), strict=True))


TIED = (
    f"SELECT count(*) FROM previous_calls p JOIN ({CALLS}) a ON a.thread = p.thread AND a.event_id = p.prev_id "
    f"JOIN ({CALLS}) b ON b.thread = p.thread AND b.event_id = p.event_id WHERE a.start_ns = b.start_ns"
)


def _blocking(table: pa.Table) -> set[int]:
    """The event ids of the calls that block, by the module's pattern over each row's name."""
    calls = table.filter(pc.and_(pc.equal(table["kind"], "cuda_api"), pc.is_valid(table["start_ns"])))
    return {
        e
        for e, n in zip(calls["event_id"].to_pylist(), calls["name"].to_pylist(), strict=True)
        if n and Y.SYNC_CALL.match(re.sub(r"_v\d+$", "", n))
    }


def _check(table: pa.Table, monkeypatch: pytest.MonkeyPatch) -> int:
    """Compares at every bucket width (and the blocking calls with the rows' names); the number of
    blocking calls that start with the call before them."""
    tied = 0
    with Source(table) as source:
        Y.prepare_calls(source)
        assert set(source.arrow("SELECT event_id FROM blocking_calls")["event_id"].to_pylist()) == _blocking(table)
    for width in BUCKETS:
        monkeypatch.setattr(Y, "FIRST_BUCKET_NS", width)
        with Source(table) as source:
            Y.prepare_calls(source)
            Y.classify(source)
            got = _pairs(source, "SELECT * FROM previous_calls")
            assert got == _pairs(source, WINDOW), width
            tied = source.scalar(TIED)
    return tied


@pytest.mark.parametrize("path", TRACES, ids=lambda p: Path(p).name)
def test_previous_calls_equal_the_window(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _check(load(path, columns=INPUT_COLUMNS), monkeypatch)


@pytest.mark.parametrize("path", TRACES, ids=lambda p: Path(p).name)
def test_the_calls_pass_finds_the_same_previous_calls(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the calls are leaves, the calls' pass gives each blocking call the window's previous call
    (its duration 0 where the call has none, as the classification reads it); read in small batches,
    so that a thread's previous call often lies in the batch before."""
    monkeypatch.setattr(L, "RATIO", 0)
    monkeypatch.setattr(L, "MOST_STRUCTURE", 10**9)
    monkeypatch.setattr(L, "BATCH", 64)
    with Source(load(path, columns=INPUT_COLUMNS)) as source:
        facts = SM.prepare(source, SM.STEP_PATTERN)
        Y.prepare_calls(source)
        calls = L.scan(source, facts, M.trace_codes(source), Y.blocking_ids(source))
        if calls is None:  # not leaves (see leaves.py): the search above is what finds them
            assert not Path(path).name.startswith(("buggy", "fixed", "train_buggy"))  # real calls under real ranges
            return
        Y.classify(source, calls.previous_calls())
        got = _pairs(source, "SELECT thread, event_id, prev_id, prev_dur FROM previous_calls")
        want = _pairs(source, WINDOW.replace("w.prev_dur FROM", "coalesce(w.prev_dur, 0) AS prev_dur FROM", 1))
        assert got == want and (len(want) > 10 or not Path(path).name.startswith(("buggy", "fixed")))


@pytest.mark.parametrize("ends", ["kept", "reversed"])
def test_ties_in_start_time(ends: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hand-made from a real trace: every CUDA call's start rounded down to 100 us, so that many
    calls of a thread start together and the order falls to their ends and event ids; "reversed":
    within each 100 us the later a call started, the earlier it ends (the ends decide, not the ids)."""
    table = load(fixture("pytorch/h200/train_buggy.pt.trace.json.gz"), columns=INPUT_COLUMNS)
    api = pc.equal(table["kind"], "cuda_api")
    start = table["start_ns"]
    rounded = pc.multiply(pc.divide(start, 100_000), 100_000)
    table = table.set_column(table.column_names.index("start_ns"), "start_ns", pc.if_else(api, rounded, start))
    if ends == "reversed":
        end = pc.add(rounded, pc.subtract(200_000, pc.subtract(start, rounded)))
        table = table.set_column(table.column_names.index("end_ns"), "end_ns", pc.if_else(api, end, table["end_ns"]))
    assert _check(table, monkeypatch) >= 3  # blocking calls that start with the call before them
