"""`traceconv perfetto --format json`: Chrome's JSON trace format, with the same nesting guarantees.

Read back with the json module (numbers as exact decimals): every row is a complete (``X``) or
instant (``i``) event with its name, its time (microseconds from ``otherData.traceconv_base_ns``)
and duration to the nanosecond; the complete events of each (pid, tid) nest; every launch ->
GPU work link is an ``s``/``f`` flow pair on the two events' threads; allocator rows are
counters.
"""

from __future__ import annotations

import json
from collections import defaultdict
from decimal import Decimal
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import traceconv
from traceconv.render.perfetto import export

from .conftest import fixture
from .test_perfetto import expected_slices, frame

INPUTS = [fixture("nsys/h200/buggy.sqlite"), fixture("pytorch/h200/train_buggy.pt.trace.json.gz")]


@pytest.fixture(scope="module", params=INPUTS, ids=lambda p: p.name)
def chrome(request: Any, tmp_path_factory: Any) -> tuple[pd.DataFrame, dict[str, Any]]:
    out = tmp_path_factory.mktemp("json") / "out.trace.json"
    export([request.param], out, fmt="json")
    return frame(traceconv.read(request.param)), json.loads(out.read_text(), parse_float=Decimal)


def ns(doc: dict[str, Any], us: Decimal) -> int:
    return int(us * 1000) + int(doc["otherData"]["traceconv_base_ns"])


def test_every_row_is_an_event_with_its_name_time_and_duration(chrome: Any) -> None:
    table, doc = chrome
    events = {e["args"]["event_id"]: e for e in doc["traceEvents"] if e["ph"] in ("X", "i")}
    rows = expected_slices(table)
    assert len(events) == len(rows)
    for row in rows.itertuples():
        e = events[row.event_id]
        instant = row.phase == "i" or pd.isna(row.end_ns)
        assert (e["name"], e["cat"], e["ph"], ns(doc, e["ts"])) == (
            row.name,
            row.kind,
            "i" if instant else "X",
            row.start_ns,
        )
        if not instant:
            assert int(e["dur"] * 1000) == row.end_ns - row.start_ns


def test_complete_events_of_each_thread_nest(chrome: Any) -> None:
    _, doc = chrome
    per_thread: dict[tuple[int, int], list[tuple[Decimal, Decimal]]] = defaultdict(list)
    for e in doc["traceEvents"]:
        if e["ph"] == "X":
            per_thread[e["pid"], e["tid"]].append((e["ts"], e["ts"] + e["dur"]))
    for spans in per_thread.values():
        open_: list[Decimal] = []
        for start, end in sorted(spans, key=lambda s: (s[0], -s[1])):
            while open_ and open_[-1] <= start:
                open_.pop()
            assert not open_ or end <= open_[-1], "two events of one thread cross"
            open_.append(end)


def test_flows_join_each_launch_to_its_gpu_work(chrome: Any) -> None:
    table, doc = chrome
    events = doc["traceEvents"]
    by_id = {e["args"]["event_id"]: e for e in events if e["ph"] == "X"}
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert starts.keys() == ends.keys()
    linked = table[table["launch_event_id"].notna() & table["start_ns"].notna()]
    assert len(ends) == len(linked) > 0
    at = {(e["pid"], e["tid"], e["ts"]): e["args"]["event_id"] for e in by_id.values()}
    got = {
        (at[s["pid"], s["tid"], s["ts"]], at[ends[i]["pid"], ends[i]["tid"], ends[i]["ts"]]) for i, s in starts.items()
    }
    assert got == set(zip(linked["launch_event_id"].astype(int), linked["event_id"], strict=True))
    assert all(e["bp"] == "e" for e in ends.values())


def test_threads_and_processes_are_named(chrome: Any) -> None:
    _, doc = chrome
    events = doc["traceEvents"]
    named = {(e["pid"], e.get("tid")) for e in events if e["ph"] == "M" and e["name"].endswith("_name")}
    for e in events:
        if e["ph"] in ("X", "i"):
            assert (e["pid"], e["tid"]) in named and (e["pid"], None) in named


def test_allocator_rows_are_counters(chrome: Any) -> None:
    table, doc = chrome
    memory = table[(table["kind"] == "memory") & table["total_allocated_bytes"].notna() & (table["device"] >= 0)]
    if memory.empty:
        pytest.skip("no allocator rows")
    samples = [e for e in doc["traceEvents"] if e["ph"] == "C" and e["name"] == "memory allocated (bytes)"]
    assert sorted(int(e["args"]["value"]) for e in samples) == sorted(memory["total_allocated_bytes"].tolist())


def test_json_and_protobuf_hold_the_same_slices(tmp_path: Path) -> None:
    from .perfetto_read import read

    src = fixture("nsys/h200/buggy.sqlite")
    export([src], tmp_path / "a.pftrace")
    export([src], tmp_path / "a.json", fmt="json")
    doc = json.loads((tmp_path / "a.json").read_text(), parse_float=Decimal)
    in_json = {(e["args"]["event_id"], ns(doc, e["ts"])) for e in doc["traceEvents"] if e["ph"] in ("X", "i")}
    assert in_json == {(s.args["event_id"], s.start) for s in read(tmp_path / "a.pftrace").slices}
