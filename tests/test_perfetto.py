"""`traceconv perfetto` (issue 21 part 2): the Perfetto trace read back with Perfetto's own protos.

Each real input is exported, read back with ``perfetto_trace_pb2`` (tests/perfetto_read.py
rebuilds the slices as trace processor does) and checked against the unified table of the
same input, row for row: every kernel, copy, memset, CUDA call, NVTX range and operator is a
slice with the row's name, start and duration, on the track of its stream or thread; no
slice is unmatched, unclosed or crossing another on its track; every GPU row with a
launching call has a flow from that call's slice to its own; allocator rows are counters.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

import traceconv
from traceconv.render.perfetto import export

from .conftest import fixture, param_path, real_files
from .perfetto_read import Slice, Trace, read

SLICE_PHASES = ("X", "i")
COUNTER_KINDS = ("memory", "metric")
GPU_KINDS = ("kernel", "memcpy", "memset")


INPUTS = {
    "buggy.sqlite": lambda: fixture("nsys/h200/buggy.sqlite"),
    "train_buggy": lambda: fixture("pytorch/h200/train_buggy.pt.trace.json.gz"),
    "sm_after.sqlite": lambda: fixture("nsys/h200-metrics/sm_after.sqlite"),  # GPU metric samples
}


@pytest.fixture(scope="module", params=sorted(INPUTS))
def exported(request: Any, tmp_path_factory: Any) -> tuple[Path, pd.DataFrame, Trace]:
    path = INPUTS[request.param]()
    out = tmp_path_factory.mktemp("perfetto") / "out.pftrace"
    export([path], out)
    return path, frame(traceconv.read(path)), read(out)


def frame(table: pa.Table) -> pd.DataFrame:
    """Integers stay exact (nullable ``Int64``, not float64 with NaN)."""
    return table.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype(), pa.int32(): pd.Int64Dtype()}.get)


def expected_slices(table: pd.DataFrame) -> pd.DataFrame:
    """The rows that become slices or instants: a time, a range or instant phase, not a counter."""
    rows = table[table["phase"].isin(SLICE_PHASES) & table["start_ns"].notna() & ~table["kind"].isin(COUNTER_KINDS)]
    return rows.astype({"kind": str, "name": str})


def by_event_id(trace: Trace) -> dict[int, Slice]:
    found = {s.args["event_id"]: s for s in trace.slices}
    assert len(found) == len(trace.slices), "two slices of one row"
    return found


def crossings(trace: Trace) -> list[tuple[str, str]]:
    """Pairs of slices on one track that overlap without nesting (checked from the times alone)."""
    bad = []
    per_track: dict[int, list[Slice]] = defaultdict(list)
    for s in trace.slices:
        per_track[s.track].append(s)
    for slices in per_track.values():
        open_: list[Slice] = []
        for s in sorted(slices, key=lambda s: (s.start, -s.end)):
            while open_ and open_[-1].end <= s.start:
                open_.pop()
            if open_ and s.end > open_[-1].end:
                bad.append((open_[-1].name, s.name))
            open_.append(s)
    return bad


def test_every_row_is_a_slice_with_its_name_start_and_duration(exported: Any) -> None:
    _, table, trace = exported
    rows = expected_slices(table)
    slices = by_event_id(trace)
    assert len(slices) == len(rows)
    for row in rows.itertuples():
        s = slices[row.event_id]
        instant = row.phase == "i" or pd.isna(row.end_ns)
        assert (s.name, s.category, s.start, s.instant) == (row.name, row.kind, row.start_ns, instant), row
        assert s.dur == (0 if instant else row.end_ns - row.start_ns), row


def test_every_kernel_is_there(exported: Any) -> None:
    _, table, trace = exported
    kernels = table[table["kind"] == "kernel"]
    assert len(kernels) > 0
    got = Counter((s.name, s.start, s.dur) for s in trace.slices if s.category == "kernel")
    assert got == Counter(zip(kernels["name"].astype(str), kernels["start_ns"], kernels["dur_ns"], strict=True))


def test_no_unmatched_unclosed_or_crossing_slice(exported: Any) -> None:
    _, _, trace = exported
    assert trace.problems == []
    assert crossings(trace) == []


def test_gpu_rows_on_their_stream_host_rows_on_their_thread(exported: Any) -> None:
    path, table, trace = exported
    slices = by_event_id(trace)
    for row in expected_slices(table).itertuples():
        where = trace.path(slices[row.event_id].track)
        assert where[0].endswith(f"[{path.name}]"), (row, where)
        if pd.notna(row.device) and pd.notna(row.stream):
            assert where[0].startswith(f"GPU {row.device} ") and where[1].startswith(f"stream {row.stream}"), where
        elif pd.notna(row.tid) and pd.notna(row.pid):
            assert len(where) >= 2 and str(int(row.tid)) in where[1], (row, where)


def test_flows_link_each_launch_to_its_gpu_work(exported: Any) -> None:
    _, table, trace = exported
    linked = table[table["launch_event_id"].notna() & table["start_ns"].notna()]
    assert len(linked) > 0
    pairs = {(a.args["event_id"], b.args["event_id"]) for a, b in trace.flows.values()}
    assert pairs == set(zip(linked["launch_event_id"].astype(int), linked["event_id"], strict=True))
    assert len(trace.flows) == len(linked)


def test_allocator_rows_are_memory_counters(exported: Any) -> None:
    path, table, trace = exported
    memory = table[(table["kind"] == "memory") & table["total_allocated_bytes"].notna()]
    if memory.empty:
        pytest.skip(f"{path.name} has no allocator rows")
    for device, rows in memory[memory["device"] >= 0].groupby("device"):
        track = next(u for u in trace.tracks if trace.path(u) == [f"GPU {device} [{path.name}]", "memory allocated"])
        values = rows.sort_values(["start_ns", "event_id"])["total_allocated_bytes"].tolist()
        assert [v for _, v in trace.counters[track]] == values
        assert trace.tracks[track].counter.unit == trace.tracks[track].counter.UNIT_SIZE_BYTES


def test_gpu_metric_rows_are_counters(exported: Any) -> None:
    path, table, trace = exported
    metrics = table[table["kind"] == "metric"]
    if "value" in metrics:
        metrics = metrics[metrics["value"].notna()]
    if metrics.empty:
        pytest.skip(f"{path.name}: this traceconv converts no GPU metric rows (kind metric)")
    samples = sum(len(v) for u, v in trace.counters.items() if trace.tracks[u].counter.unit_name)
    assert samples == len(metrics)


def test_every_track_is_described_and_named(exported: Any) -> None:
    _, _, trace = exported
    used = {s.track for s in trace.slices} | set(trace.counters)
    assert used <= set(trace.tracks)
    for uuid, d in trace.tracks.items():
        assert trace.track_name(uuid).strip(), d
        assert d.sibling_merge_behavior == d.SIBLING_MERGE_BEHAVIOR_NONE  # lanes must not be merged back


def test_overlapping_gpu_work_goes_on_child_tracks() -> None:
    """buggy.sqlite's stream-sync rows overlap the kernels they wait for: a lane under stream 7."""
    trace = read_export([fixture("nsys/h200/buggy.sqlite")])
    lanes = [u for u in trace.tracks if trace.track_name(u).startswith("stream 7 · overlap")]
    assert lanes
    on_lanes = Counter(s.category for s in trace.slices if s.track in lanes)
    assert on_lanes and set(on_lanes) <= {"sync", "kernel", "memcpy", "memset"}
    assert all(trace.track_name(trace.tracks[u].parent_uuid) == "stream 7" for u in lanes)


def read_export(paths: list[Path], **options: Any) -> Trace:
    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"traceconv-test-{os.getpid()}.pftrace"
    try:
        export(paths, out, **options)
        return read(out)
    finally:
        out.unlink(missing_ok=True)


SWEEP_LIMIT = 3 << 20  # bytes: the larger real files are left to the three inputs above (time)
SWEEP = [
    p
    for p in [*real_files("pytorch", ["*.json", "*.json.gz"]), *real_files("nsys", ["*.sqlite"])]
    if param_path(p).stat().st_size <= SWEEP_LIMIT
]


@pytest.mark.parametrize("path", SWEEP, ids=lambda p: Path(p).name)
def test_every_real_file_exports_every_row_nested(path: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.pftrace"
    result = export([path], out)
    trace = read(out)
    rows = expected_slices(frame(traceconv.read(path).select(["event_id", "kind", "name", "phase", "start_ns"])))
    assert trace.problems == [] and crossings(trace) == []
    slices = by_event_id(trace)
    assert len(slices) == len(rows)
    got = [(slices[e].name, slices[e].start - result.shift_ns) for e in rows["event_id"].tolist()]
    want = list(zip(rows["name"].tolist(), rows["start_ns"].tolist(), strict=True))
    assert got == want, next((g, w) for g, w in zip(got, want, strict=True) if g != w)
