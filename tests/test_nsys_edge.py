"""Edge cases that no export of the corpus has, on a hand-made copy of fixed.sqlite.

The corpus's NVTX events are all push/pop ranges (59) and domain creations (75); start/end
ranges (60) that end on another thread or never, marks (34), named domains with push/pop
ranges, interned text (textId), batched copies (copyCount > 1), a CUDA event record's time
(2026.2's `timestamp`) and diagnostic messages without their ENUM tables or with invalid
UTF-8 are made here by hand, in the columns and codes that Nsight Systems uses for them.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import traceconv
from traceconv.readers.nsys.enums import SEVERITIES, labelled
from traceconv.readers.nsys.parts import json_args

from .conftest import fixture

FIXED = fixture("nsys/h200/fixed.sqlite")
MAIN = 281485059818073  # globalTid of fixed.sqlite's main thread (pid 601, tid 601)
OTHER = 281485059818126  # its pt_autograd_0 thread (tid 654)
EVENT_AT = 9_318_600_000  # after its cudaEventRecordWithFlags call (9,318,513,855 to 9,318,527,925)


@pytest.fixture(scope="module")
def edited(tmp_path_factory: pytest.TempPathFactory) -> pa.Table:
    path = tmp_path_factory.mktemp("edge") / "hand_made.sqlite"
    shutil.copy(FIXED, path)
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO StringIds (id, value) VALUES (900001, 'checkpoint')")
        rows = [  # start, end, eventType, text, globalTid, endGlobalTid, textId, domainId
            (4_000_000_000, 4_100_000_000, 60, "io_wait", MAIN, OTHER, None, 0),
            (4_200_000_000, None, 60, "never_ends", MAIN, None, None, 0),
            (4_300_000_000, None, 34, None, MAIN, None, 900001, 0),
            (4_000_000_001, None, 75, "MyDomain", MAIN, None, None, 7),
            (4_311_182_000, 4_311_183_000, 59, "inner", MAIN, None, None, 7),  # in model_inference, around a call
        ]
        db.executemany(
            "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, endGlobalTid, textId, "
            "domainId) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        db.execute("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET copyCount = 4 WHERE rowid = 1")
        # 2026.2's CUDA event records carry a `timestamp` (the corpus's 2026.2 export has none recorded)
        db.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_CUDA_EVENT ADD COLUMN timestamp INTEGER")
        db.execute(f"UPDATE CUPTI_ACTIVITY_KIND_CUDA_EVENT SET timestamp = {EVENT_AT}")
        # exports before 2022.4 have no ENUM_* tables (none of them has DIAGNOSTIC_EVENT yet either)
        for table in ("SEVERITY_LEVEL", "SOURCE_TYPE", "TIMESTAMP_SOURCE"):
            db.execute(f"DROP TABLE ENUM_DIAGNOSTIC_{table}")
        db.execute("UPDATE DIAGNOSTIC_EVENT SET severity = 9 WHERE text = 'Profiling has stopped.'")
        db.execute("UPDATE DIAGNOSTIC_EVENT SET text = CAST(X'436f6d6d6f6e20ff' AS TEXT) WHERE text LIKE 'Common%'")
    return traceconv.read(path)


def _one(table: pa.Table, name: str) -> dict[str, Any]:
    [row] = table.filter(pc.equal(table["name"].cast(pa.string()), name)).to_pylist()
    return row


def test_start_end_range_ending_on_another_thread(edited: pa.Table) -> None:
    row = _one(edited, "io_wait")
    assert (row["kind"], row["phase"], row["tid"], row["dur_ns"]) == ("nvtx", "X", 601, 100_000_000)
    assert json.loads(row["args"])["endGlobalTid"] == OTHER


def test_a_range_that_never_ends_has_no_end(edited: pa.Table) -> None:
    row = _one(edited, "never_ends")
    assert row["kind"] == "nvtx" and row["start_ns"] is not None and row["end_ns"] is None and row["dur_ns"] is None
    notes = json.loads(edited.schema.metadata[b"traceconv.stats"])["notes"]
    assert any(n.startswith("1 NVTX start/end ranges never ended") for n in notes)


def test_a_mark_is_an_instant_named_by_its_text_id(edited: pa.Table) -> None:
    row = _one(edited, "checkpoint")
    assert (row["kind"], row["phase"], row["dur_ns"]) == ("marker", "i", 0)
    assert row["end_ns"] == row["start_ns"]


def test_domains_name_their_ranges(edited: pa.Table) -> None:
    inner = _one(edited, "inner")
    assert (inner["kind"], inner["domain"]) == ("nvtx", "MyDomain")
    created = _one(edited, "MyDomain")
    assert (created["kind"], created["phase"]) == ("other", "i")
    default = edited.filter(pc.equal(edited["name"].cast(pa.string()), "model_inference"))
    assert default.num_rows == 10 and default["domain"].null_count == 10  # the default domain has no name


def test_a_push_pop_range_of_any_domain_is_an_op(edited: pa.Table) -> None:
    inner = _one(edited, "inner")
    api = edited.filter(pc.equal(edited["op_event_id"], inner["event_id"])).to_pylist()
    assert api and all(r["kind"] == "cuda_api" and r["tid"] == 601 for r in api)
    assert all(inner["start_ns"] <= r["start_ns"] <= inner["end_ns"] for r in api)


def test_batched_copies_are_noted(edited: pa.Table) -> None:
    notes = json.loads(edited.schema.metadata[b"traceconv.stats"])["notes"]
    assert any(n.startswith("1 memcpy rows stand for several copies") for n in notes)


def test_a_cuda_event_record_with_a_timestamp_is_an_instant_after_its_call(edited: pa.Table) -> None:
    row = _one(edited, "CUDA event record")
    epoch = json.loads(edited.schema.metadata[b"traceconv.trace"])["session_start_ns"]
    at = epoch + EVENT_AT
    assert (row["kind"], row["phase"], row["start_ns"], row["end_ns"], row["dur_ns"]) == ("other", "i", at, at, 0)
    assert row["launch_start_ns"] == epoch + 9_318_513_855 and row["queue_ns"] == EVENT_AT - 9_318_527_925
    assert "timestamp" not in json.loads(row["args"])


def test_diagnostic_labels_without_enum_tables_are_the_embedded_ones(edited: pa.Table) -> None:
    started = json.loads(_one(edited, "Profiling has started.")["args"])
    assert started == {"severity": "Info", "source": "Analysis", "timestampType": "Target timestamp", "timestamp": 0}
    injected = json.loads(_one(edited, "CUDA injection initialized successfully.")["args"])
    assert (injected["source"], injected["severity"]) == ("Injection", "Info")
    assert json.loads(_one(edited, "Profiling has stopped.")["args"])["severity"] == "code 9"


def test_a_diagnostic_message_of_invalid_utf8_is_kept_with_replacement_characters(edited: pa.Table) -> None:
    row = _one(edited, "Common \ufffd")
    assert (row["kind"], row["category"], row["pid"]) == ("other", "DIAGNOSTIC_EVENT", 601)


def test_args_of_many_distinct_rows_quote_their_labels() -> None:
    """Hand-made: over 1,024 distinct rows take json_args' column-wise path, not the per-row one."""
    t = pa.table({"timestamp": pa.array(range(3000), pa.int64()), "ratio": pa.array([0.5, float("inf"), None] * 1000)})
    severity = labelled(pa.array([1, 2, 9] * 1000, pa.int64()), SEVERITIES)
    args = json_args(t, ["timestamp", "ratio"], {"severity": severity})
    assert args is not None and len(args) == 3000
    assert [json.loads(a) for a in args.to_pylist()[:3]] == [
        {"severity": "Info", "timestamp": 0, "ratio": 0.5},
        {"severity": "Warning", "timestamp": 1, "ratio": None},
        {"severity": "code 9", "timestamp": 2, "ratio": None},
    ]


def test_invalid_utf8_text_is_kept_replaced_and_noted(tmp_path: Path) -> None:
    """An NVTX name and a kernel name (interned in StringIds) that are not UTF-8: the report
    still converts, with U+FFFD in place of the bad bytes, and a note says where."""
    path = tmp_path / "hand_made_latin1.sqlite"
    shutil.copy(FIXED, path)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE NVTX_EVENTS SET text = CAST(X'6d6f64e86c' AS TEXT) WHERE rowid = 1")  # 'mod\xe8l'
        (kernel,) = db.execute("SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1").fetchone()
        db.execute("UPDATE StringIds SET value = CAST(X'7363616cff' AS TEXT) WHERE id = ?", (kernel,))
    table = traceconv.read(path)
    names = table["name"].cast(pa.string())
    kinds = table["kind"].cast(pa.string())
    nvtx = names.filter(pc.equal(kinds, "nvtx")).to_pylist()
    kernels = names.filter(pc.equal(kinds, "kernel")).to_pylist()
    assert "mod\ufffdl" in nvtx and "scal\ufffd" in kernels
    assert "model_inference" in nvtx  # the other ranges keep their name
    notes = json.loads(table.schema.metadata[b"traceconv.stats"])["notes"]
    assert any("invalid UTF-8" in n and "NVTX_EVENTS 1" in n and "StringIds 1" in n for n in notes), notes
