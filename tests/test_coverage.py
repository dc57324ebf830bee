"""What a profile can answer (issue 45, item 5): ``summary``'s ``lacks`` against what the raw files hold.

The truth is read from each file itself, not through traceconv: a PyTorch trace's ``traceEvents`` (GPU
rows by their category, ``[memory]`` instants, step ranges by name, operators' ``Input Dims``), an
Nsight Systems export's tables (CUPTI activity, ``CUDA_GPU_MEMORY_USAGE_EVENTS``, ``GPU_METRICS``, NVTX
ranges by name). Two edge cases no real file has are hand-made from a real export, and named so: a
capture that ends inside a step, and a diagnostic in which Nsight Systems says it dropped events.
"""

from __future__ import annotations

import gzip
import json
import lzma
import re
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from traceconv.analyses.common import load
from traceconv.analyses.prepare import INPUT_COLUMNS
from traceconv.analyses.steps import STEP_PATTERN
from traceconv.analyses.summary import as_dict, summarize

from .conftest import FIXTURES, fixture

STEP = re.compile(STEP_PATTERN)
GPU_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset"}
CPU_OPS = {"cpu_op", "operator"}  # Kineto's category of operators, and older Kineto's
TORCH = [
    "pytorch/h200/seed_linear.json",  # no steps
    "pytorch/h200/train_buggy.pt.trace.json.gz",  # steps, allocator events, shapes
    "pytorch/h200/cuda_graph.json",  # no allocator events, no shapes
    "pytorch/public/facebookresearch__HolisticTraceAnalysis__tests_data_ns_resolution_trace_rank-0."
    "Apr_03_18_51_38.1102.pt.trace.json.gz",  # steps, no shapes
    "pytorch/public/AMD-AGI__TraceLens__tests_traces_b200_eager_trace.json.gz",  # shapes, no steps, no memory
    "pytorch/public/pytorch__kineto__tb_plugin_samples_resnet50_num_workers_0_worker0.1623143089861.pt.trace.json.gz",
    "planted/h200/pytorch/decode_graph.json",  # a CUDA graph replayed: no operators at all
    "planted/h200/pytorch/leak.json",
]
NSYS = [
    "nsys/h200/buggy.sqlite",
    "nsys/h200-metrics/sm_before.sqlite",  # GPU metrics
    "nsys/h200/graph_whole.sqlite",
    "planted/h200/nsys/decode.sqlite",
    "planted/h200/nsys/leak.sqlite",
]


def real(rel: str) -> Path:
    return fixture(rel, packed=(FIXTURES / f"{rel}.xz").exists())


def lacked(path: Path) -> set[str]:
    got = as_dict(summarize(load(path, columns=INPUT_COLUMNS)))["lacks"]
    return {str(x["missing"]) for x in got}


def _events(path: Path) -> list[dict[str, Any]]:
    opener: Any = gzip.open if path.suffix == ".gz" else lzma.open if path.suffix == ".xz" else open
    with opener(path, "rt") as f:
        doc = json.load(f)
    events: list[dict[str, Any]] = doc["traceEvents"] if isinstance(doc, dict) else doc
    return events


def torch_truth(path: Path) -> set[str]:
    events = _events(path)
    cats = [str(e.get("cat", "")).lower() for e in events]
    ops = [e for e, c in zip(events, cats, strict=True) if c in CPU_OPS]
    out = {"GPU metrics"}  # a PyTorch trace never holds them
    if not any(c in GPU_CATEGORIES for c in cats):
        out.add("GPU activity")
    if not any(e.get("name") == "[memory]" for e in events):
        out.add("allocator events")
    if not any(e.get("ph") == "X" and STEP.search(str(e.get("name", ""))) for e in events):
        out.add("steps")
    if ops and not any("Input Dims" in (e.get("args") or {}) for e in ops):
        out.add("input shapes")
    return out


def _rows(db: sqlite3.Connection, table: str) -> int:
    if not db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone():
        return 0
    return int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def nsys_truth(path: Path) -> set[str]:
    db = sqlite3.connect(path)
    out = set()
    activities = ("KERNEL", "MEMCPY", "MEMSET", "GRAPH_TRACE")
    if not sum(_rows(db, f"CUPTI_ACTIVITY_KIND_{k}") for k in activities):
        out.add("GPU activity")
    if not _rows(db, "CUDA_GPU_MEMORY_USAGE_EVENTS"):
        out.add("allocator events")
    if not _rows(db, "GPU_METRICS"):
        out.add("GPU metrics")
    names = []
    if _rows(db, "NVTX_EVENTS"):
        names = [
            r[0]
            for r in db.execute(
                "SELECT coalesce(e.text, s.value) FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId "
                "WHERE e.end IS NOT NULL"
            )
        ]
    if not any(n and STEP.search(n) for n in names):
        out.add("steps")
    return out


@pytest.mark.parametrize("rel", TORCH, ids=lambda r: Path(r).name[:60])
def test_what_a_pytorch_trace_lacks_is_what_its_raw_file_does_not_hold(rel: str) -> None:
    path = real(rel)
    assert lacked(path) == torch_truth(path)


@pytest.mark.parametrize("rel", NSYS, ids=lambda r: Path(r).name)
def test_what_an_nsys_export_lacks_is_what_its_tables_do_not_hold(rel: str) -> None:
    path = real(rel)
    got = lacked(path) - {"input shapes"}  # judged on the program's framework: the test below
    assert got == nsys_truth(path)


def test_an_nsys_export_of_pytorch_without_shape_ranges_lacks_shapes_and_one_with_them_does_not() -> None:
    assert "input shapes" in lacked(real("planted/h200/nsys/decode.sqlite"))  # plain NVTX ranges
    assert "input shapes" not in lacked(real("nsys/h200/autograd_nvtx.sqlite"))  # autograd-shapes-nvtx


def _hand_made(tmp_path: Path, sql: str) -> Path:
    out = tmp_path / "hand_made.sqlite"
    shutil.copy(real("planted/h200/nsys/decode.sqlite"), out)
    with sqlite3.connect(out) as db:
        db.executescript(sql)
    return out


def test_hand_made_a_capture_that_ends_inside_a_step_is_said(tmp_path: Path) -> None:
    """Hand-made (no real export here ends inside a step): the last step range of a real export left open."""
    path = _hand_made(
        tmp_path,
        "UPDATE NVTX_EVENTS SET end = NULL WHERE rowid = (SELECT e.rowid FROM NVTX_EVENTS e LEFT JOIN StringIds s "
        "ON s.id = e.textId WHERE coalesce(e.text, s.value) LIKE 'step%' ORDER BY e.start DESC LIMIT 1)",
    )
    assert "the end of a step" in lacked(path)
    assert "the end of a step" not in lacked(real("planted/h200/nsys/decode.sqlite"))


def test_hand_made_events_the_profiler_says_it_dropped_are_said(tmp_path: Path) -> None:
    """Hand-made (no real export here has Nsight Systems drop events): its diagnostic added to a real export."""
    text = "CUPTI buffer overflow: 1234 events were dropped"
    path = _hand_made(
        tmp_path,
        "INSERT INTO DIAGNOSTIC_EVENT (timestamp, timestampType, source, severity, text, globalPid) "
        f"SELECT timestamp + 1, timestampType, source, 2, '{text}', globalPid FROM DIAGNOSTIC_EVENT LIMIT 1",
    )
    got = as_dict(summarize(load(path, columns=INPUT_COLUMNS)))["lacks"]
    assert any(x["missing"] == "events the profiler dropped" and text in x["hides"] for x in got), got
    assert "events the profiler dropped" not in lacked(real("planted/h200/nsys/decode.sqlite"))
