"""Nsight Systems SQLite reader: every export of the corpus, checked against sqlite3 and NVIDIA's nsys stats.

Truth comes from outside the reader: row counts and values are queried with plain sqlite3
in the test, and per-kernel/per-copy/per-range figures come from what `nsys stats` printed
for fixed.sqlite (fixtures/nsys/nsys-stats).
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
import shutil
import sqlite3
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from click.testing import CliRunner

import traceconv
import traceconv.readers
from traceconv.cli import main
from traceconv.errors import InputError, UnsupportedFormatError

from .conftest import fixture, real_files

FIXED = fixture("nsys/h200/fixed.sqlite")
OVERHEAD = "PROFILER_OVERHEAD"
CUDA_EVENT = "CUPTI_ACTIVITY_KIND_CUDA_EVENT"
DIAGNOSTIC = "DIAGNOSTIC_EVENT"
EXPORTS = real_files("nsys", ("*.sqlite",))
# FORMATS.md's copy kinds, spelled here independently of the reader.
COPY = {1: "HtoD", 2: "DtoH", 8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "UVM HtoD", 12: "UVM DtoH", 13: "UVM DtoD"}
STATS_COPY = {
    "[CUDA memcpy Host-to-Device]": "HtoD",
    "[CUDA memcpy Device-to-Host]": "DtoH",
    "[CUDA memcpy Device-to-Device]": "DtoD",
}


def _db(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def _tables(db: sqlite3.Connection) -> set[str]:
    return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _count(db: sqlite3.Connection, table: str, where: str = "") -> int:
    if table not in _tables(db):
        return 0
    return int(db.execute(f"SELECT count(*) FROM {table} {where}").fetchone()[0])


def _epoch(db: sqlite3.Connection) -> int:
    """The session's start in Unix-epoch nanoseconds, 0 for an export without it (times stay relative)."""
    if not _count(db, "TARGET_INFO_SESSION_START_TIME"):
        return 0
    return int(db.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0])


def _rows(table: pa.Table, columns: list[str] | None = None, **equal: str) -> list[dict[str, Any]]:
    for key, value in equal.items():
        table = table.filter(pc.equal(table[key].cast(pa.string()), value))
    return (table.select(columns) if columns else table).to_pylist()


def _csv(name: str) -> list[dict[str, str]]:
    with open(fixture(f"nsys/h200/nsys-stats/fixed.{name}.csv"), newline="") as fh:
        return list(csv.DictReader(fh))


def _api(name: str) -> str:
    return re.sub(r"_v\d{4,}$", "", name)


@pytest.fixture(scope="module")
def fixed() -> pa.Table:
    return traceconv.read(FIXED)


def _meta(table: pa.Table, key: bytes) -> Any:
    return json.loads(table.schema.metadata[key])


# -- every export -------------------------------------------------------------------------------
@pytest.mark.parametrize("path", EXPORTS, ids=lambda p: p.name[:45])
def test_every_export_converts_with_one_row_per_source_row(path: Path) -> None:
    table = traceconv.read(path)
    kinds = Counter(table["kind"].to_pylist())
    categories = Counter(table["category"].to_pylist())
    with _db(path) as db:
        want = {
            "kernel": _count(db, "CUPTI_ACTIVITY_KIND_KERNEL"),
            "memcpy": _count(db, "CUPTI_ACTIVITY_KIND_MEMCPY"),
            "memset": _count(db, "CUPTI_ACTIVITY_KIND_MEMSET"),
            "cuda_api": _count(db, "CUPTI_ACTIVITY_KIND_RUNTIME"),
            "sync": _count(db, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"),
            "nvtx": _count(db, "NVTX_EVENTS", "WHERE eventType IN (59, 60)"),
            "marker": _count(db, "NVTX_EVENTS", "WHERE eventType = 34"),
            "overhead": _count(db, "PROFILER_OVERHEAD"),
            "memory": _count(db, "CUDA_GPU_MEMORY_USAGE_EVENTS"),
            "metric": _count(db, "GPU_METRICS"),
            "graph": _count(db, "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"),
            "other": _count(db, "NVTX_EVENTS", "WHERE eventType NOT IN (34, 59, 60)")
            + _count(db, "OSRT_API")
            + _count(db, CUDA_EVENT)
            + _count(db, DIAGNOSTIC),
        }
        for name in (
            "CUPTI_ACTIVITY_KIND_KERNEL",
            "CUPTI_ACTIVITY_KIND_RUNTIME",
            "NVTX_EVENTS",
            "OSRT_API",
            OVERHEAD,
            CUDA_EVENT,
        ):
            assert categories.get(name, 0) == _count(db, name), name
        session = _count(db, "TARGET_INFO_SESSION_START_TIME")
        first = (
            db.execute("SELECT min(start) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0]
            if "CUPTI_ACTIVITY_KIND_RUNTIME" in _tables(db)
            else None
        )
        epoch = _epoch(db)
    assert {k: v for k, v in kinds.items()} == {k: v for k, v in want.items() if v}
    assert table["event_id"].to_pylist() == list(range(table.num_rows))
    assert set(table["source"].to_pylist()) <= {"nsys"}
    assert table.schema.metadata[b"traceconv.time_base"] == (b"unix_epoch" if session else b"relative")
    if first is not None:
        api = table.filter(pc.equal(table["kind"].cast(pa.string()), "cuda_api"))
        assert pc.min(api["start_ns"]).as_py() == first + epoch


def test_times_are_absolute_and_durations_exact(fixed: pa.Table) -> None:
    with _db(FIXED) as db:
        epoch = _epoch(db)
        want = sorted(db.execute("SELECT start, end FROM CUPTI_ACTIVITY_KIND_MEMSET").fetchall())
    rows = _rows(fixed, kind="memset")
    assert sorted((r["start_ns"] - epoch, r["end_ns"] - epoch) for r in rows) == want
    assert all(r["dur_ns"] == r["end_ns"] - r["start_ns"] for r in rows)
    assert _meta(fixed, b"traceconv.trace")["session_start_ns"] == epoch


# -- fixed.sqlite against NVIDIA's nsys stats ----------------------------------------------------
def test_per_kernel_times_equal_cuda_kern_exec_trace(fixed: pa.Table) -> None:
    epoch = _meta(fixed, b"traceconv.trace")["session_start_ns"]
    want = sorted(_csv("cuda_kern_exec_trace"), key=lambda r: (int(r["API Start (ns)"]), int(r["Kernel Start (ns)"])))
    ours = sorted(_rows(fixed, kind="kernel"), key=lambda r: (r["launch_start_ns"], r["start_ns"]))
    assert len(ours) == len(want) == 1987

    def opt(v: str) -> int | None:
        return int(float(v)) if v else None

    for row, k in zip(want, ours, strict=True):
        got = {
            "API Start (ns)": k["launch_start_ns"] - epoch,
            "API Dur (ns)": k["launch_end_ns"] - k["launch_start_ns"],
            "Queue Start (ns)": k["launch_end_ns"] - epoch if k["queue_ns"] is not None else None,
            "Queue Dur (ns)": k["queue_ns"],
            "Kernel Start (ns)": k["start_ns"] - epoch,
            "Kernel Dur (ns)": k["dur_ns"],
            "Total Dur (ns)": k["wall_ns"],
            "PID": k["pid"],
            "TID": k["launch_tid"],
            "DevId": k["device"],
        }
        assert {h: opt(row[h]) for h in got} == got, row
        assert (_api(row["API Function"]), row["Kernel Name"]) == (k["launch_name"], k["name"])
        assert row["GridXYZ"].split() == [str(k[c]) for c in ("grid_x", "grid_y", "grid_z")]
        assert row["BlockXYZ"].split() == [str(k[c]) for c in ("block_x", "block_y", "block_z")]


def test_kernel_names_and_totals_equal_cuda_gpu_kern_sum(fixed: pa.Table) -> None:
    per_name: dict[str, list[int]] = defaultdict(list)
    for r in _rows(fixed, kind="kernel"):
        per_name[r["name"]].append(r["dur_ns"])
    want = {
        r["Name"]: (int(r["Instances"]), int(r["Total Time (ns)"]), int(r["Min (ns)"]), int(r["Max (ns)"]))
        for r in _csv("cuda_gpu_kern_sum")
    }
    assert {n: (len(d), sum(d), min(d), max(d)) for n, d in per_name.items()} == want


def test_kernel_columns_equal_the_export(fixed: pa.Table) -> None:
    with _db(FIXED) as db:
        want = sorted(
            db.execute(
                "SELECT k.start, k.streamId, k.deviceId, k.contextId, s.value, k.registersPerThread, "
                "k.staticSharedMemory + k.dynamicSharedMemory, k.correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                "JOIN StringIds s ON s.id = k.shortName"
            ).fetchall()
        )
        epoch = _epoch(db)
    got = sorted(
        (
            r["start_ns"] - epoch,
            r["stream"],
            r["device"],
            r["context"],
            r["short_name"],
            r["registers_per_thread"],
            r["shared_memory_bytes"],
            r["correlation_id"],
        )
        for r in _rows(fixed, kind="kernel")
    )
    assert got == want


def test_copies_and_memsets_equal_cuda_gpu_mem_time_sum(fixed: pa.Table) -> None:
    want = {
        STATS_COPY.get(r["Operation"], r["Operation"]): (int(r["Count"]), int(r["Total Time (ns)"]))
        for r in _csv("cuda_gpu_mem_time_sum")
    }
    got: dict[str, list[int]] = defaultdict(list)
    for r in _rows(fixed, kind="memcpy"):
        got[r["copy_kind"]].append(r["dur_ns"])
    for r in _rows(fixed, kind="memset"):
        got["[CUDA memset]"].append(r["dur_ns"])
    assert {k: (len(v), sum(v)) for k, v in got.items()} == want


def test_copy_bytes_and_directions_equal_the_export() -> None:
    for path in [
        FIXED,
        *(
            fixture(f"nsys/public/{n}")
            for n in ("PolPuigPuy__OpenACC_Project_PolPuig__report2.sqlite", "SMcMann__cudaHW__report3.sqlite")
        ),
    ]:
        with _db(path) as db:
            want = Counter(
                {
                    (COPY[k], b): n
                    for k, b, n in db.execute(
                        "SELECT copyKind, bytes, count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY GROUP BY 1, 2"
                    )
                }
            )
        cols = ["copy_kind", "src_kind", "dst_kind", "bytes", "dur_ns", "name", "bandwidth_gbps"]
        rows = _rows(traceconv.read(path), cols, kind="memcpy")
        assert Counter((r["copy_kind"], r["bytes"]) for r in rows) == want, path.name
        for r in rows:
            assert r["name"] == f"Memcpy {r['copy_kind']} ({r['src_kind']} -> {r['dst_kind']})"
            assert r["bandwidth_gbps"] is None or r["bandwidth_gbps"] == pytest.approx(r["bytes"] / r["dur_ns"])


def test_memory_kinds_pageable_pinned_device(fixed: pa.Table) -> None:
    kinds = Counter((r["copy_kind"], r["src_kind"], r["dst_kind"]) for r in _rows(fixed, kind="memcpy"))
    assert kinds == {
        ("HtoD", "Pageable", "Device"): 69,
        ("DtoH", "Device", "Pinned"): 3,
        ("DtoD", "Device", "Device"): 72,
    }
    assert {r["dst_kind"] for r in _rows(fixed, kind="memset")} == {"Device"}


def test_api_calls_equal_cuda_api_sum(fixed: pa.Table) -> None:
    got: dict[str, list[int]] = defaultdict(list)
    for r in _rows(fixed, kind="cuda_api"):
        got[r["name"]].append(r["dur_ns"])
    want = {_api(r["Name"]): (int(r["Num Calls"]), int(r["Total Time (ns)"])) for r in _csv("cuda_api_sum")}
    assert {n: (len(d), sum(d)) for n, d in got.items()} == want
    classes = Counter((r["api_class"], r["name"][:4] == "cuda") for r in _rows(fixed, kind="cuda_api"))
    assert set(classes) == {("runtime", True), ("driver", False)}


def test_nvtx_ranges_equal_nvtx_sum(fixed: pa.Table) -> None:
    got: dict[str, list[int]] = defaultdict(list)
    for r in _rows(fixed, kind="nvtx"):
        got[f"{r['domain'] or ''}:{r['name']}"].append(r["dur_ns"])
    want = {r["Range"]: (int(r["Instances"]), int(r["Total Time (ns)"])) for r in _csv("nvtx_sum")}
    assert {k: (len(v), sum(v)) for k, v in got.items()} == want


def test_sync_rows_follow_their_call_not_the_contradicting_code(fixed: pa.Table) -> None:
    rows = _rows(fixed, kind="sync")
    assert len(rows) == 66
    assert {(r["launch_name"], r["sync_type"], r["name"]) for r in rows} == {
        ("cudaStreamSynchronize", "stream", "Stream Sync")
    }
    assert all(json.loads(r["args"])["syncType"] == 2 for r in rows)  # what nsys 2025.3.2.0 wrote
    assert any("contradicts their call" in n for n in _meta(fixed, b"traceconv.stats")["notes"])


# -- links --------------------------------------------------------------------------------------
def test_op_is_the_innermost_enclosing_push_pop_range_on_the_thread(fixed: pa.Table) -> None:
    rows = fixed.to_pylist()
    ranges = [r for r in rows if r["kind"] == "nvtx"]
    starts = np.array([r["start_ns"] for r in ranges])
    ends = np.array([r["end_ns"] for r in ranges])
    tids = np.array([r["tid"] for r in ranges])
    checked = 0
    for r in rows:
        if r["kind"] != "cuda_api":
            continue
        inside = np.flatnonzero((tids == r["tid"]) & (starts <= r["start_ns"]) & (ends >= r["start_ns"]))
        want = None
        if len(inside):
            best = max(inside, key=lambda i: (starts[i], -ends[i]))
            want = ranges[best]["event_id"]
        assert r["op_event_id"] == want, r
        checked += want is not None
    assert checked > 1000
    by_id = {r["event_id"]: r for r in rows}
    for r in rows:
        if r["kind"] in ("kernel", "memcpy", "memset"):
            assert r["op_event_id"] == by_id[r["launch_event_id"]]["op_event_id"]
            assert r["op_name"] == (by_id[r["op_event_id"]]["name"] if r["op_event_id"] is not None else None)


def test_launch_is_joined_within_the_process_in_a_two_process_export() -> None:
    path = fixture("nsys/public/GindaChen__nsys-ai__mfu_2gpu_before.sqlite")
    with _db(path) as db:
        want = sorted(
            db.execute(
                "SELECT k.start, r.start, (r.globalTid & 16777215) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON k.correlationId = r.correlationId "
                "AND k.globalPid = (r.globalTid & -16777216)"
            ).fetchall()
        )
        epoch = _epoch(db)
        kernels = _count(db, "CUPTI_ACTIVITY_KIND_KERNEL")
    table = traceconv.read(path)
    ours = [r for r in _rows(table, kind="kernel") if r["launch_event_id"] is not None]
    assert len({r["pid"] for r in ours}) == 2
    assert sorted((r["start_ns"] - epoch, r["launch_start_ns"] - epoch, r["launch_tid"]) for r in ours) == want
    counters = _meta(table, b"traceconv.stats")["counters"]
    unlaunched = sum(
        1 for k in ("kernel", "memcpy", "memset") for r in _rows(table, kind=k) if r["launch_event_id"] is None
    )
    assert counters["gpu_rows_without_launch"] == unlaunched >= kernels - len(want) > 0


def test_uvm_migrations_are_kept_without_a_launch() -> None:
    path = fixture("nsys/public/SMcMann__cudaHW__report3.sqlite")
    table = traceconv.read(path)
    copies = _rows(table, ["copy_kind", "launch_event_id", "queue_ns"], kind="memcpy")
    assert len(copies) == 24576 and {r["copy_kind"] for r in copies} == {"UVM HtoD"}
    assert all(r["launch_event_id"] is None and r["queue_ns"] is None for r in copies)
    assert _meta(table, b"traceconv.stats")["counters"]["gpu_rows_without_launch"] == 24576


def test_whole_graph_launches_are_linked_to_cuda_graph_launch() -> None:
    table = traceconv.read(fixture("nsys/h200/graph_whole.sqlite"))
    graphs = _rows(table, category="CUPTI_ACTIVITY_KIND_GRAPH_TRACE")
    assert len(graphs) == 5 and {r["kind"] for r in graphs} == {"graph"}  # GPU work, one row an execution
    assert {r["launch_name"] for r in graphs} == {"cudaGraphLaunch"} and all(r["graph_id"] for r in graphs)
    assert {r["name"] for r in graphs} == {f"CUDA graph {graphs[0]['graph_id']}"}


# -- the profiler's own tables ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "path",
    [
        FIXED,  # 2025.3: returnValue
        fixture("nsys/public/GindaChen__nsys-ai__mfu_2gpu_before.sqlite"),  # 2026.2: overheadType instead
        fixture("nsys/public/lockfuehrer__beast_ressoruces__report2.sqlite"),  # before 2022.2: correlationId too
    ],
    ids=lambda p: p.name[:30],
)
def test_profiler_overhead_rows_equal_the_export(path: Path) -> None:
    with _db(path) as db:
        want = db.execute(
            f"SELECT p.start, p.end, (p.globalTid >> 24) & 16777215, p.globalTid & 16777215, s.value "
            f"FROM {OVERHEAD} p LEFT JOIN StringIds s ON s.id = p.nameId"
        ).fetchall()
        extra = {r[1] for r in db.execute(f"PRAGMA table_info({OVERHEAD})")} - {"start", "end", "globalTid", "nameId"}
        epoch = _epoch(db)
    rows = _rows(traceconv.read(path), kind="overhead")
    got = [(r["start_ns"] - epoch, r["end_ns"] - epoch, r["pid"], r["tid"], r["name"]) for r in rows]
    assert len(want) > 0 and sorted(got) == sorted(want)
    assert {(r["category"], r["phase"]) for r in rows} == {(OVERHEAD, "X")}
    assert all(r["dur_ns"] == r["end_ns"] - r["start_ns"] >= 0 for r in rows)
    assert {frozenset(json.loads(r["args"])) for r in rows} == {frozenset(extra)}
    assert all(r["correlation_id"] is None and r["return_value"] is None for r in rows)


def test_profiler_overhead_is_on_the_threads_of_the_process(fixed: pa.Table) -> None:
    rows = _rows(fixed, kind="overhead")
    assert len(rows) == 30 and {r["process_name"] for r in rows} == {"python3"}
    assert {r["thread_name"] for r in rows} >= {"python3", "CUPTI worker thread"}
    assert Counter(r["name"] for r in rows)["CUPTI Buffer flush"] == 4
    assert all(r["op_event_id"] is None and r["launch_event_id"] is None for r in rows)


@pytest.mark.parametrize(
    "path",
    [
        FIXED,
        fixture("nsys/public/caoye310__Lower-Triangular-Solves__2c4e430__report1.sqlite"),
    ],  # 2025.3; 2023.3 (fewer columns)
    ids=lambda p: p.name[:30],
)
def test_cuda_event_records_are_linked_to_their_call_and_have_no_time(path: Path) -> None:
    with _db(path) as db:
        want = db.execute(
            f"SELECT e.deviceId, e.contextId, e.streamId, e.correlationId, (e.globalPid >> 24) & 16777215, "
            f"r.start, r.end, r.globalTid & 16777215, s.value FROM {CUDA_EVENT} e "
            "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = e.correlationId "
            "AND e.globalPid = (r.globalTid & -16777216) JOIN StringIds s ON s.id = r.nameId"
        ).fetchall()
        mapped = {"deviceId", "contextId", "streamId", "correlationId", "globalPid"}
        extra = {r[1] for r in db.execute(f"PRAGMA table_info({CUDA_EVENT})")} - mapped
        epoch = _epoch(db)
    rows = _rows(traceconv.read(path), category=CUDA_EVENT)
    gpu = ("device", "context", "stream", "correlation_id", "pid")
    got = [
        (
            *(r[c] for c in gpu),
            r["launch_start_ns"] - epoch,
            r["launch_end_ns"] - epoch,
            r["launch_tid"],
            r["launch_name"],
        )
        for r in rows
    ]
    assert len(want) > 0 and sorted(got) == sorted((*w[:8], _api(w[8])) for w in want)
    assert {r["launch_name"] for r in rows} <= {"cudaEventRecord", "cudaEventRecordWithFlags"}
    assert {(r["kind"], r["phase"], r["name"]) for r in rows} == {("other", "i", "CUDA event record")}
    assert all(r["start_ns"] is None and r["end_ns"] is None and r["queue_ns"] is None for r in rows)
    assert {frozenset(json.loads(r["args"])) for r in rows} == {frozenset(extra)} and "eventId" in extra


@pytest.mark.parametrize(
    "path",
    [FIXED, fixture("nsys/public/Sh1mwww__llama3-inference__real_inference_simulation.sqlite")],  # 2025.3; 2024.6
    ids=lambda p: p.name[:30],
)
def test_diagnostic_messages_are_instants_with_their_labels(path: Path) -> None:
    with _db(path) as db:
        want = db.execute(
            "SELECT d.timestamp, iif(d.timestampType = 2, NULL, d.timestamp), d.text, "
            "iif(d.globalPid < 0, NULL, (d.globalPid >> 24) & 16777215), v.label, s.label, c.label "
            f"FROM {DIAGNOSTIC} d "
            "JOIN ENUM_DIAGNOSTIC_SEVERITY_LEVEL v ON v.id = d.severity "
            "JOIN ENUM_DIAGNOSTIC_SOURCE_TYPE s ON s.id = d.source "
            "JOIN ENUM_DIAGNOSTIC_TIMESTAMP_SOURCE c ON c.id = d.timestampType"
        ).fetchall()
        epoch = _epoch(db)
    rows = _rows(traceconv.read(path), category=DIAGNOSTIC)
    got = []
    for r in rows:
        a = json.loads(r["args"])
        at = r["start_ns"] - epoch if r["start_ns"] is not None else None
        got.append((a["timestamp"], at, r["name"], r["pid"], a["severity"], a["source"], a["timestampType"]))
    assert len(want) > 0 and sorted(got, key=str) == sorted(want, key=str)
    assert {(r["kind"], r["phase"], r["tid"]) for r in rows} == {("other", "i", None)}
    assert all(r["end_ns"] == r["start_ns"] and r["dur_ns"] == (0 if r["start_ns"] else None) for r in rows)
    assert {"Profiling has started.", "Profiling has stopped."} <= {r["name"] for r in rows if r["pid"] is None}
    assert any(r["start_ns"] is None for r in rows)  # host-clock messages: not on the session's timeline


def test_the_note_lists_only_tables_still_not_converted(tmp_path: Path) -> None:
    notes = _meta(traceconv.read(FIXED), b"traceconv.stats")["notes"]
    assert not [n for n in notes if "not converted" in n]
    result = CliRunner().invoke(
        main, ["nsys", str(fixture("nsys/h200/graph_whole.sqlite")), "-o", str(tmp_path / "g.parquet")]
    )
    assert result.exit_code == 0, result.output
    assert "note: not converted (no place in the unified schema yet): CUDA_GRAPH_EVENTS (4 rows)\n" in result.output
    assert not {OVERHEAD, CUDA_EVENT, DIAGNOSTIC} & set(re.findall(r"[A-Z_]{6,}", result.output))


# -- metadata, names, odd exports ------------------------------------------------------------------
def test_metadata_version_gpus_and_names(fixed: pa.Table) -> None:
    trace = _meta(fixed, b"traceconv.trace")
    assert trace["nsys_version"] == "2025.3.2.0"
    assert [g["name"] for g in trace["gpus"]] == ["NVIDIA H200"]
    api = _rows(fixed, kind="cuda_api")
    assert {r["process_name"] for r in api} == {"python3"}
    assert {(r["tid"], r["thread_name"]) for r in api} >= {(601, "python3"), (654, "pt_autograd_0")}
    old = fixture("nsys/public/lockfuehrer__beast_ressoruces__report2.sqlite")
    gpus = _meta(traceconv.read(old), b"traceconv.trace")["gpus"]
    assert len(gpus) == 2 and all(g["name"] for g in gpus)  # TARGET_INFO_CUDA_GPU, before 2021.2


def test_export_without_cuda_tables_is_empty_with_a_note(tmp_path: Path) -> None:
    path = fixture("nsys/public/mabdullahsoyturk__cardiac-simulation__report1.sqlite")
    result = traceconv.convert(path, tmp_path / "c.parquet")
    assert result.rows == 0
    assert any("no CUDA tables" in n for n in result.info.notes)
    assert traceconv.read_unified(tmp_path / "c.parquet").empty


def test_the_input_is_not_modified(tmp_path: Path) -> None:
    copy = tmp_path / "fixed.sqlite"
    shutil.copy(FIXED, copy)
    before = hashlib.sha256(copy.read_bytes()).hexdigest()
    traceconv.convert(copy, tmp_path / "out.parquet")
    assert hashlib.sha256(copy.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fixed.sqlite", "out.parquet"]  # no -wal, -journal


def test_not_an_nsys_export_is_unsupported(tmp_path: Path) -> None:
    path = tmp_path / "notes.sqlite"  # hand-made: an SQLite database of something else
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE notes (id INTEGER, text TEXT)")
    with pytest.raises(UnsupportedFormatError, match=r"notes\.sqlite: is an SQLite database but not an Nsight"):
        traceconv.read(path)
    for command in ("ingest", "nsys"):
        result = CliRunner().invoke(main, [command, str(path), "-o", str(tmp_path / "x.parquet")])
        assert result.exit_code == 4, result.output
        assert "notes.sqlite" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "x.parquet").exists()


def test_a_damaged_export_names_the_file_and_table(tmp_path: Path) -> None:
    path = tmp_path / "damaged.sqlite"  # hand-made: fixed.sqlite with the kernel table's root page zeroed
    shutil.copy(FIXED, path)
    with _db(FIXED) as db:
        page_size = db.execute("PRAGMA page_size").fetchone()[0]
        root = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'CUPTI_ACTIVITY_KIND_KERNEL'").fetchone()[0]
    data = bytearray(path.read_bytes())
    data[(root - 1) * page_size : root * page_size] = b"\xff" * page_size
    path.write_bytes(bytes(data))
    with pytest.raises(InputError, match=r"damaged.sqlite: table CUPTI_ACTIVITY_KIND_KERNEL cannot be read"):
        traceconv.read(path)
    result = CliRunner().invoke(main, ["nsys", str(path)])
    assert result.exit_code == 3 and "Traceback" not in result.output


def test_progress_reaches_the_file_size() -> None:
    seen: list[tuple[int, int]] = []
    reader = traceconv.readers.open_reader(FIXED, progress=lambda done, total: seen.append((done, total)))
    assert (
        sum(t.num_rows for t in reader.tables()) == 8122 + 30 + 1 + 12
    )  # + PROFILER_OVERHEAD, CUDA_EVENT, DIAGNOSTIC_EVENT
    size = FIXED.stat().st_size
    assert seen[-1] == (size, size) and [d for d, _ in seen] == sorted(d for d, _ in seen)
