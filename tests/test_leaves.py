"""The trees' pass with CUDA API calls as leaves (``analyses.leaves``) against the sorted stream of
every host range (``tree.walk``): the same summary, on every real trace of both sources with the
leaves' path forced (it applies by itself only where calls outnumber the other ranges), and on
hand-made variants of a real export where a call is no leaf, which the check must refuse."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from traceconv.analyses import leaves as L
from traceconv.analyses import summary as SM
from traceconv.analyses.common import load
from traceconv.analyses.prepare import INPUT_COLUMNS
from traceconv.analyses.source import Source

from .conftest import fixture, fixture_files

TRACES = [
    *fixture_files("nsys/h200", ["*.sqlite"]),
    *fixture_files("nsys/public", ["*.sqlite"]),
    *fixture_files("pytorch/h200", ["*.json", "*.json.gz"]),
    *fixture_files("pytorch/public", ["*.json", "*.json.gz"]),
]
# A Kineto trace whose CUDA runtime calls nest inside one another on a thread (1,977 of them).
NESTED = "facebookresearch__HolisticTraceAnalysis__tests_data_negative_queue_length_values_check_rank0.json.gz"


def _summary(data: pa.Table, monkeypatch: pytest.MonkeyPatch, leaves: bool) -> tuple[str, bool]:
    """The summary's JSON with or without the leaves' path, and whether that path gave the trees."""
    monkeypatch.setattr(L, "RATIO", 0 if leaves else 10**18)
    monkeypatch.setattr(L, "MOST_STRUCTURE", 10**9)
    used: list[bool] = []
    scan = L.scan

    def recorded(*args: Any) -> Any:
        calls = scan(*args)
        used.append(calls is not None)
        return calls

    monkeypatch.setattr(L, "scan", recorded)
    with Source(data) as source:
        text = json.dumps(SM.as_dict(SM.summarize(source)), sort_keys=True, default=str)
    return text, any(used)


def _both(data: pa.Table, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Asserts both ways agree; whether the leaves' path was taken."""
    sorted_stream, _ = _summary(data, monkeypatch, leaves=False)
    lean, used = _summary(data, monkeypatch, leaves=True)
    assert lean == sorted_stream
    return used


@pytest.mark.parametrize("path", TRACES, ids=lambda p: Path(p).name)
def test_the_leaves_path_gives_the_summary_of_the_sorted_stream(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    used = _both(load(path, columns=INPUT_COLUMNS), monkeypatch)
    if Path(path).name.startswith(("buggy", "fixed", "autograd_nvtx", "ddp_rank0", "train_buggy")):
        assert used  # the comparison is not vacuous where it matters: real calls under real ranges


def test_calls_inside_calls_take_the_sorted_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not _both(load(fixture(f"pytorch/public/{NESTED}"), columns=INPUT_COLUMNS), monkeypatch)


def _buggy() -> pa.Table:
    return load(fixture("nsys/h200/buggy.sqlite"), columns=INPUT_COLUMNS)


def _moved(table: pa.Table, kind: str, index: int, start: int, end: int) -> pa.Table:
    """Hand-made from a real export: the ``index``-th row of ``kind`` moved to [start, end]."""
    rows = pc.indices_nonzero(pc.equal(table["kind"], kind)).to_pylist()
    row = rows[index]
    cols = {}
    for name, value in (("start_ns", start), ("end_ns", end), ("dur_ns", end - start)):
        values = table[name].to_pylist()
        values[row] = value
        cols[name] = pa.array(values, pa.int64())
    for name, col in cols.items():
        table = table.set_column(table.column_names.index(name), name, col)
    return table


def test_a_range_starting_inside_a_call_takes_the_sorted_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hand-made: an NVTX range of a real export moved to start inside a long call of its thread."""
    table = _buggy()
    assert _both(table, monkeypatch)  # unchanged, the export takes the leaves' path
    ranges = table.filter(pc.equal(table["kind"], "nvtx"))
    calls = table.filter(pc.and_(pc.equal(table["kind"], "cuda_api"), pc.equal(table["tid"], ranges["tid"][0])))
    longest = pc.index(calls["dur_ns"], pc.max(calls["dur_ns"])).as_py()
    start, end = calls["start_ns"][longest].as_py(), calls["end_ns"][longest].as_py()
    moved = _moved(table, "nvtx", 0, start + 1, end + 1)
    assert not _both(moved, monkeypatch)


def test_a_call_inside_a_call_takes_the_sorted_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hand-made: a call of a real export moved inside the call before it (same thread)."""
    table = _buggy()
    calls = table.filter(pc.equal(table["kind"], "cuda_api"))
    tid = calls["tid"].to_pylist()
    later = tid.index(tid[0], 1)  # the next call of the first call's thread
    start, end = calls["start_ns"][0].as_py(), calls["end_ns"][0].as_py()
    moved = _moved(table, "cuda_api", later, start + 1, max(start + 1, end - 1))
    assert not _both(moved, monkeypatch)


def test_a_negative_gpu_duration_is_summed_call_by_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hand-made: a kernel of a real export given a negative duration larger than its call's other
    work, so that the call's sum is negative and passes nothing up (the leaves' path sums per call)."""
    table = _buggy()
    kernels = pc.indices_nonzero(pc.and_(pc.equal(table["kind"], "kernel"), pc.is_valid(table["launch_event_id"])))
    row = kernels[0].as_py()
    durations = table["dur_ns"].to_pylist()
    durations[row] = -(10**12)
    table = table.set_column(table.column_names.index("dur_ns"), "dur_ns", pa.array(durations, pa.int64()))
    assert _both(table, monkeypatch)
