"""bench/make_big_nsys.py: an export repeated N times stays an export whose copies link like the original."""

from __future__ import annotations

import importlib.util
import sqlite3
from pathlib import Path
from typing import Any

import pyarrow.compute as pc

import traceconv

from .conftest import fixture

ROOT = Path(__file__).resolve().parents[1]
SOURCE = fixture("nsys/h200/fixed.sqlite")
KERNEL, RUNTIME = "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"


def _make_big() -> Any:
    spec = importlib.util.spec_from_file_location("make_big_nsys", ROOT / "bench" / "make_big_nsys.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _all(path: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return db.execute(sql).fetchall()


def test_three_copies_follow_each_other_with_unique_ids(tmp_path: Path) -> None:
    out = tmp_path / "x3.sqlite"
    _make_big().make(SOURCE, out, 3)

    for table in (KERNEL, RUNTIME, "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_MEMCPY", "PROFILER_OVERHEAD"):
        (n,) = _all(SOURCE, f"SELECT count(*) FROM {table}")[0]
        assert _all(out, f"SELECT count(*) FROM {table}")[0][0] == 3 * n > 0
    assert _all(out, "SELECT count(*) FROM StringIds") == _all(SOURCE, "SELECT count(*) FROM StringIds")
    n = _all(SOURCE, f"SELECT count(*) FROM {KERNEL}")[0][0]
    rows = _all(out, f"SELECT start, [end], correlationId, demangledName, globalPid FROM {KERNEL} ORDER BY rowid")
    copies = [rows[k * n : (k + 1) * n] for k in range(3)]
    assert [r[3:] for r in copies[1]] == [r[3:] for r in copies[0]]  # same names, same process
    assert max(r[1] for r in copies[0]) < min(r[0] for r in copies[1])  # copy 1 starts after copy 0 ends
    assert max(r[1] for r in copies[1]) < min(r[0] for r in copies[2])
    ids = [{r[2] for r in c} for c in copies]
    assert not (ids[0] & ids[1]) and not (ids[1] & ids[2])


def test_copies_convert_with_the_same_links(tmp_path: Path) -> None:
    out = tmp_path / "x3.sqlite"
    _make_big().make(SOURCE, out, 3)

    one, three = traceconv.read(SOURCE), traceconv.read(out)
    assert three.num_rows == 3 * one.num_rows
    for col in ("launch_name", "op_name", "queue_ns"):
        assert pc.count(three[col]).as_py() == 3 * pc.count(one[col]).as_py() > 0
    assert pc.sum(three["dur_ns"]).as_py() == 3 * pc.sum(one["dur_ns"]).as_py()
