"""The trees' pass with CUDA API calls as leaves (``analyses.leaves``) against the sorted stream of
every host range (``tree.walk``): the same summary, on every real trace of both sources with the
leaves' path forced (it applies by itself only where calls outnumber the other ranges), and on
hand-made variants of a real export where a call is no leaf, which the check must refuse."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from traceconv.analyses import summary as SM
from traceconv.analyses.common import load
from traceconv.analyses.prepare import INPUT_COLUMNS, host_extents, host_span
from traceconv.analyses.source import Source
from traceconv.analyses.summary import measure as M
from traceconv.analyses.summary.attribution import leaves as L

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


@pytest.mark.parametrize("path", TRACES, ids=lambda p: Path(p).name)
def test_host_extents_are_those_of_the_rows(path: Path) -> None:
    """The calls' pass and the window read the host ranges' extents from one grouped query: each
    class's count, ids and times, as the rows (the CUDA calls apart) say."""
    table = load(path, columns=INPUT_COLUMNS)
    kind, device = table["kind"], table["device"]
    host = pc.and_(
        pc.and_(pc.is_in(kind, pa.array(["cpu_op", "nvtx", "cuda_api"])), pc.is_valid(table["start_ns"])),
        pc.or_(pc.is_null(device), pc.not_equal(kind, "nvtx")),
    )
    want = {}
    for calls in (True, False):
        rows = table.filter(pc.and_(host, pc.equal(pc.equal(kind, "cuda_api"), calls)))
        if rows.num_rows:
            want[calls] = _extent_of(rows)
    with Source(table) as source:
        assert host_extents(source) == want
        assert host_span(source) == _extent_of(table.filter(host))


def _extent_of(rows: pa.Table) -> dict[str, Any]:
    return {
        "n": rows.num_rows,
        "first_id": pc.min(rows["event_id"]).as_py(),
        "first": pc.min(rows["start_ns"]).as_py(),
        "last_id": pc.max(rows["event_id"]).as_py(),
        "last_start": pc.max(rows["start_ns"]).as_py(),
        "last": pc.max(rows["end_ns"]).as_py(),
    }


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


def test_an_export_without_gpu_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hand-made: a real export without its kernels, copies and memsets (calls and NVTX ranges only):
    the GPU rows' pass reads nothing, and both ways give the same summary."""
    table = _buggy()
    gpu = pc.is_in(table["kind"], pa.array(["kernel", "memcpy", "memset"]))
    assert _both(table.filter(pc.invert(gpu)), monkeypatch)


def test_gpu_rows_whose_first_node_is_an_operator(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hand-made (in the real exports every GPU row's first node is its launching call): every third
    GPU row with an operator loses its launching call, so that its operator, a range of the
    structure, is its first node (its GPU time, and a copy's region, go to that range)."""
    table = _buggy()
    gpu = pc.and_(pc.is_in(table["kind"], pa.array(["kernel", "memcpy", "memset"])), pc.is_valid(table["op_event_id"]))
    rows = pc.indices_nonzero(gpu).to_pylist()[::3]
    launch = table["launch_event_id"].to_pylist()
    for row in rows:
        launch[row] = None
    table = table.set_column(
        table.column_names.index("launch_event_id"), "launch_event_id", pa.array(launch, pa.int64())
    )
    copies = pc.sum(pc.equal(pc.take(table["kind"], pa.array(rows)), "memcpy")).as_py()
    assert len(rows) > 10 and copies > 0  # operators are first nodes, of copies too
    assert _both(table, monkeypatch)


def _lookups(table: pa.Table, monkeypatch: pytest.MonkeyPatch, few_runs: int) -> tuple[list[Any], int]:
    """Every id around the calls' ids and the process ``launch_lookup`` gives it, the runs' limit at
    ``few_runs``; and how many processes the calls have."""
    monkeypatch.setattr(L, "RATIO", 0)
    monkeypatch.setattr(L, "MOST_STRUCTURE", 10**9)
    monkeypatch.setattr(L, "FEW_RUNS", few_runs)
    with Source(table) as source:
        facts = SM.prepare(source, SM.STEP_PATTERN)
        calls = L.scan(source, facts, M.trace_codes(source))
        assert calls is not None
        lo, hi = calls.first_id - 2, calls.first_id + len(calls.pid_of) + 2
        expected = [
            calls.pids[c] if c >= 0 else None for c in calls.pid_codes(np.arange(lo, hi, dtype=np.int64)).tolist()
        ]
        with L.launch_lookup(source, calls) as call_pid:
            got = source.arrow(f"SELECT {call_pid('i')} AS p FROM range({lo}, {hi}) t(i) ORDER BY i")["p"]
        assert got.to_pylist() == expected
        return expected, len(calls.pids)


def _recoded(table: pa.Table, pid_of_call: Callable[[int, int], int], gap: bool) -> pa.Table:
    """Hand-made from a real export: the ``i``-th call's process ``pid_of_call(i, pid)``; with ``gap``,
    a call in the middle made another kind of row (an id among the calls' that names no call)."""
    calls = pc.indices_nonzero(pc.equal(table["kind"], "cuda_api")).to_pylist()
    pid = table["pid"].to_pylist()
    for i, row in enumerate(calls):
        pid[row] = pid_of_call(i, pid[row])
    table = table.set_column(table.column_names.index("pid"), "pid", pa.array(pid, pa.int64()))
    if gap:
        kind = table["kind"].to_pylist()
        kind[calls[len(calls) // 2]] = "other"
        table = table.set_column(table.column_names.index("kind"), "kind", pa.array(kind).dictionary_encode())
    return table


@pytest.mark.parametrize("few_runs", [-1, L.FEW_RUNS], ids=["python", "macro"])
def test_a_calls_process_is_found_by_its_id(few_runs: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The process of the call an id names, by the macro of runs and by the Python lookup, on a
    real export, on it with its calls in three blocks of processes and an id among them that is no
    call, and with the process changed call by call (too many runs for the macro)."""
    table = _buggy()
    got, processes = _lookups(table, monkeypatch, few_runs)
    assert processes == 1 and any(p is not None for p in got) and None in got
    third = pc.sum(pc.equal(table["kind"], "cuda_api")).as_py() // 3
    blocks = _recoded(table, lambda i, p: p + min(i // third, 2), gap=True)
    got, processes = _lookups(blocks, monkeypatch, few_runs)
    assert processes == 3 and None in got[3:-3]
    mixed = _recoded(table, lambda i, p: p + i % 3, gap=False)
    got, processes = _lookups(mixed, monkeypatch, few_runs)
    assert processes == 3 and len({p for p in got if p is not None}) == 3
