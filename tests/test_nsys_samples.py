"""GPU metrics (kind ``metric``) and CUDA memory usage (kind ``memory``) of Nsight Systems exports.

Truth comes from plain sqlite3 queries on the same exports: one metric row per ``GPU_METRICS``
row with the name ``TARGET_INFO_GPU_METRICS`` gives it, one memory row per
``CUDA_GPU_MEMORY_USAGE_EVENTS`` row with its running total recomputed here.
"""

from __future__ import annotations

import re
import sqlite3
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import traceconv
import traceconv.readers.nsys.sources
import traceconv.readers.nsys.sql
import traceconv.readers.nsys.stream
from traceconv import schema as S
from traceconv.errors import InputError

from .conftest import fixture

SM_AFTER = fixture("nsys/h200-metrics/sm_after.sqlite")
MEMUSAGE = fixture("nsys/h200/memusage.sqlite")
FIXED = fixture("nsys/h200/fixed.sqlite")


def _big_metrics() -> Path:
    """``fixtures/nsys/h200/gpu_metrics.sqlite.xz`` (2.3M samples), unpacked once: too large for the sweep."""
    return fixture("nsys/h200/gpu_metrics.sqlite", packed=True)


def _query(path: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return db.execute(sql).fetchall()


def _epoch(path: Path) -> int:
    return int(_query(path, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME")[0][0])


def _kind(table: pa.Table, kind: str) -> pa.Table:
    return table.filter(pc.equal(table["kind"].cast(pa.string()), kind))


METRIC_SQL = """
SELECT m.timestamp, i.metricName, m.value, m.typeId & 255
FROM GPU_METRICS m JOIN TARGET_INFO_GPU_METRICS i ON i.typeId = m.typeId AND i.metricId = m.metricId
ORDER BY m.timestamp, m.rowid
"""


def test_metric_rows_are_the_samples_in_time_order() -> None:
    table = traceconv.read(SM_AFTER)
    rows = _kind(table, "metric").select(["start_ns", "end_ns", "name", "value", "device", "unit", "phase"]).to_pylist()
    epoch = _epoch(SM_AFTER)
    want = _query(SM_AFTER, METRIC_SQL)
    assert len(rows) == len(want) == _query(SM_AFTER, "SELECT count(*) FROM GPU_METRICS")[0][0] > 10_000
    got = [(r["start_ns"] - epoch, r["name"], r["value"], r["device"]) for r in rows]
    # the clocks are named [MHz] and written in Hz (nsys 2025.3): in MHz here
    assert got == [(t, name, float(v) / (1e6 if name.endswith("[MHz]") else 1), gpu) for t, name, v, gpu in want]
    clocks = [r["value"] for r in rows if r["unit"] == "MHz"]
    assert clocks and all(1000 < v < 2500 for v in clocks)  # the H200's GPC and SYS clocks
    assert all(r["end_ns"] == r["start_ns"] and r["phase"] == "i" for r in rows)
    for r in rows:  # the unit is what the name's brackets say, "Throughput" aside
        bracket = re.search(r"\[([^\]]+)\]$", r["name"])
        assert bracket is not None and r["unit"] == bracket.group(1).replace("Throughput ", "")
    assert {r["unit"] for r in rows if r["name"] == "SMs Active [Throughput %]"} == {"%"}


def test_value_and_unit_are_the_columns_before_args() -> None:
    assert S.NAMES[-3:] == ("value", "unit", "args")
    assert S.BY_NAME["value"].type == pa.float64() and S.BY_NAME["unit"].type == S.DICT
    assert "metric" in S.KINDS


@pytest.mark.slow  # 2.3M samples, 77 MB: sm_after.sqlite's metrics are converted in the fast suite
def test_a_large_metrics_export_converts_every_sample() -> None:
    path = _big_metrics()
    table = traceconv.read(path)
    metric = _kind(table, "metric")
    want = dict(
        _query(
            path,
            "SELECT i.metricName, count(*) FROM GPU_METRICS m JOIN TARGET_INFO_GPU_METRICS i "
            "ON i.typeId = m.typeId AND i.metricId = m.metricId GROUP BY 1",
        )
    )
    assert metric.num_rows == sum(want.values()) == _query(path, "SELECT count(*) FROM GPU_METRICS")[0][0]
    assert Counter(metric["name"].to_pylist()) == want
    start = metric["start_ns"].to_numpy()
    assert (start[1:] >= start[:-1]).all()  # sorted by time
    sums = _query(path, "SELECT sum(value) FROM GPU_METRICS WHERE metricId = 3")[0][0]  # SMs Active
    sm = metric.filter(pc.equal(metric["name"].cast(pa.string()), "SMs Active [Throughput %]"))
    assert pc.sum(sm["value"]).as_py() == float(sums)
    assert set(metric["device"].to_pylist()) == {0}


def _running_totals(path: Path) -> list[tuple[int, int, int]]:
    """(signed bytes, device, allocated after it), computed row by row from sqlite3's rows."""
    rows = _query(
        path,
        "SELECT e.bytes, e.deviceId, o.label FROM CUDA_GPU_MEMORY_USAGE_EVENTS e "
        "JOIN ENUM_CUDA_DEV_MEM_EVENT_OPER o ON o.id = e.memoryOperationType ORDER BY e.start, e.rowid",
    )
    total: dict[int, int] = defaultdict(int)
    out = []
    for size, device, label in rows:
        signed = -size if label == "Deallocation" else size
        total[device] += signed
        out.append((signed, device, total[device]))
    return out


def test_memory_rows_carry_signed_bytes_and_the_running_total_per_device() -> None:
    table = traceconv.read(MEMUSAGE)
    memory = _kind(table, "memory")
    want = _running_totals(MEMUSAGE)
    assert memory.num_rows == len(want) > 1000
    got = list(
        zip(
            memory["bytes"].to_pylist(),
            memory["device"].to_pylist(),
            memory["total_allocated_bytes"].to_pylist(),
            strict=True,
        )
    )
    assert got == want
    assert all(b > 0 for b, _, _ in want)  # this export frees nothing (test_frees_count_against_the_total)
    epoch = _epoch(MEMUSAGE)
    raw = _query(
        MEMUSAGE,
        "SELECT start, address, correlationId, (globalPid >> 24) & 16777215 FROM CUDA_GPU_MEMORY_USAGE_EVENTS "
        "ORDER BY start, rowid",
    )
    import json

    args = [json.loads(a) for a in memory["args"].to_pylist()]
    assert [(s + epoch, a, c, p) for s, a, c, p in raw] == [
        (s, x["address"], c, p)
        for s, x, c, p in zip(
            memory["start_ns"].to_pylist(),
            args,
            memory["correlation_id"].to_pylist(),
            memory["pid"].to_pylist(),
            strict=True,
        )
    ]
    assert {x["memKind"] for x in args} <= {"Device", "DeviceStatic", "Managed", "Pinned", "Pageable"}
    assert set(memory["name"].to_pylist()) == {"CUDA memory allocation"}


def test_exports_without_samples_have_no_metric_or_memory_rows() -> None:
    table = traceconv.read(FIXED)
    kinds = set(table["kind"].to_pylist())
    assert not kinds & {"metric", "memory"}
    assert table["value"].null_count == table["unit"].null_count == table.num_rows


@pytest.mark.parametrize("path", [SM_AFTER, MEMUSAGE], ids=lambda p: p.name)
def test_small_batches_convert_to_the_same_table(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every table in batches of 1,000 rows (several runs of calls, totals carried over): the same rows."""
    from traceconv.readers.nsys import batches

    whole = traceconv.read(path)
    monkeypatch.setattr(batches, "BATCH_ROWS", 1000)
    streamed = traceconv.read(path)
    assert streamed.schema.metadata == whole.schema.metadata
    assert _values(streamed).equals(_values(whole))  # each batch has dictionaries of its own


@pytest.mark.parametrize("cores", [1, 2, 4, 16])
def test_one_reading_thread_on_two_cores_two_on_more(cores: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from traceconv.readers.nsys import batches

    monkeypatch.setattr(batches, "_cores", lambda: cores)
    assert batches.reading_threads() == (1 if cores <= 2 else batches.MAX_READERS)


def test_the_output_is_the_same_whatever_the_reading_threads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of 1,000 rows read by one thread and by two: the same bytes."""
    from traceconv import writing
    from traceconv.readers.nsys import batches

    monkeypatch.setattr(batches, "BATCH_ROWS", 1000)
    written = []
    for cores in (2, 4):
        monkeypatch.setattr(batches, "_cores", lambda n=cores: n)
        out = tmp_path / f"{cores}.parquet"
        writing.convert(SM_AFTER, out)
        written.append(out.read_bytes())
    assert pq.ParquetFile(tmp_path / "2.parquet").num_row_groups > 10
    assert written[0] == written[1]


def _values(table: pa.Table) -> pa.Table:
    cols = [c.cast(c.type.value_type) if pa.types.is_dictionary(c.type) else c for c in table.columns]
    return pa.table(cols, names=table.column_names)


def test_frees_count_against_the_total(tmp_path: Path) -> None:
    """Hand-made: the real export frees nothing; here every third event of memusage.sqlite is made a free."""
    path = tmp_path / "frees.sqlite"
    path.write_bytes(MEMUSAGE.read_bytes())
    with sqlite3.connect(path) as db:
        db.execute("UPDATE CUDA_GPU_MEMORY_USAGE_EVENTS SET memoryOperationType = 1 WHERE rowid % 3 = 0")
    memory = _kind(traceconv.read(path), "memory")
    want = _running_totals(path)
    assert any(b < 0 for b, _, _ in want)
    assert (
        list(
            zip(
                memory["bytes"].to_pylist(),
                memory["device"].to_pylist(),
                memory["total_allocated_bytes"].to_pylist(),
                strict=True,
            )
        )
        == want
    )


def _stored_otherwise(tmp_path: Path, name: str, *sql: str) -> Path:
    """Hand-made: fixed.sqlite changed by ``sql`` (no real export stores a table out of time order)."""
    path = tmp_path / name
    path.write_bytes(FIXED.read_bytes())
    with sqlite3.connect(path) as db:
        for statement in sql:
            db.execute(statement)
    return path


RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"


@pytest.mark.parametrize(
    ("case", "table", "batch", "sql"),
    [
        # API calls stored in reverse: the first batch is out of order
        (
            "reversed",
            RUNTIME,
            1000,
            [
                f"CREATE TABLE r AS SELECT * FROM {RUNTIME} ORDER BY rowid DESC",
                f"DELETE FROM {RUNTIME}",
                f"INSERT INTO {RUNTIME} SELECT * FROM r",
                "DROP TABLE r",
            ],
        ),
        # the first kernel of the second batch starts before the last of the first: only the
        # boundary between two batches is out of order, in the third table converted
        (
            "boundary",
            KERNEL,
            1000,
            [f"UPDATE {KERNEL} SET start = (SELECT start - 1 FROM {KERNEL} WHERE rowid = 999) WHERE rowid = 1001"],
        ),
        # copies, converted after kernels of which ten have lost their call (a count that must not double)
        (
            "late",
            "CUPTI_ACTIVITY_KIND_MEMCPY",
            100,
            [
                f"UPDATE {KERNEL} SET correlationId = -5 WHERE rowid <= 10",
                "UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET start = "
                "(SELECT start - 1 FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE rowid = 3) WHERE rowid = 120",
            ],
        ),
    ],
)
def test_a_table_out_of_order_is_read_again_through_sqlites_sort(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str, table: str, batch: int, sql: list[str]
) -> None:
    """Batches are read by rowid ranges and checked as they come; a table out of order starts the
    conversion again with that table read through SQLite's sort. The result equals the table read
    whole and sorted in memory, the output file too, and nothing is left beside it."""
    from traceconv.readers.nsys import batches

    path = _stored_otherwise(tmp_path, f"{case}.sqlite", *sql)
    whole = traceconv.read(path)  # read whole and sorted in memory (fewer rows than a batch)
    expected = traceconv.convert(path, tmp_path / "whole" / "whole.parquet").info
    monkeypatch.setattr(batches, "BATCH_ROWS", batch)
    db = traceconv.readers.nsys.sql.Database(path)
    try:
        assert batches.plan(db, table, ["start"], ("start",)).check == "start"  # read by ranges, checked
        assert batches.plan(db, table, ["start"], ("start",), sort=True).key == "[start]"
        assert batches.plan(db, table, ["end"], ("start",)).key == "[start]"  # the key not read: nothing to check
    finally:
        db.close()
    sorted_plans: list[str] = []
    plan = batches.plan

    def spy(*args: Any, **kwargs: Any) -> Any:
        got = plan(*args, **kwargs)
        if got.key is not None:
            sorted_plans.append(got.table)
        return got

    monkeypatch.setattr(traceconv.readers.nsys.stream, "plan", spy)
    streamed = traceconv.read(path)
    assert _values(streamed).equals(_values(whole))
    assert sorted_plans == [table]  # read again, sorted by SQLite: that table only
    out = tmp_path / "out" / f"{case}.parquet"
    result = traceconv.convert(path, out)
    assert _values(pq.read_table(out)).equals(_values(whole))
    again = f"not stored in time order, so read again through SQLite's sort (a second pass): {table}"
    assert result.info.notes.count(again) == 1
    others = [n for n in result.info.notes if n != again]
    assert (others, result.info.counters) == (expected.notes, expected.counters)  # the first attempt's not kept
    assert sorted(p.name for p in out.parent.iterdir()) == [out.name]


def test_key_order_of_batches_is_order_by_with_nulls_first() -> None:
    """Hand-made columns: the order :class:`KeyOrder` accepts is ``ORDER BY key, rowid``'s."""
    from traceconv.readers.nsys.batches import KeyOrder

    def holds(*batches: list[int | None]) -> bool:
        order = KeyOrder("start")
        return all(order.holds(pa.table({"start": pa.array(b, pa.int64())})) for b in batches)

    assert holds([None, None, 1, 1, 2], [2, 3], [], [5])
    assert holds([None], [None, 4], [4])
    assert not holds([1, 2], [1])  # across batches
    assert not holds([1, 3, 2])
    assert not holds([None, 1, None])  # a null after a value
    assert not holds([1], [None, 2])
    assert not holds([-(2**63)], [None])  # the smallest int64 is still after null
    assert not KeyOrder("start").holds(pa.table({"end": [1]}))  # no key: not known to be in order


def test_a_wide_table_is_read_in_fewer_rows_a_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch holds at most BATCH_VALUES values (rows x columns read): the kernels (26 columns in
    this export) come in smaller batches than the API calls, and the result is the whole read's."""
    from traceconv.readers.nsys import batches

    whole = traceconv.read(FIXED)  # every table within one batch
    monkeypatch.setattr(batches, "BATCH_ROWS", 1000)
    monkeypatch.setattr(batches, "BATCH_VALUES", 1000 * 10)
    monkeypatch.setattr(batches, "MIN_BATCH_ROWS", 100)
    db = traceconv.readers.nsys.sql.Database(FIXED)
    try:
        sources = {s.table: s for s in traceconv.readers.nsys.sources.SOURCES}
        wide = batches.plan(db, KERNEL, sources[KERNEL].columns(db), ("start",))
        narrow = batches.plan(db, RUNTIME, sources[RUNTIME].columns(db), ("start",))
    finally:
        db.close()
    assert len(wide.columns) > 10 >= len(narrow.columns)
    assert wide.ranges and narrow.ranges
    assert {b - a for a, b in wide.ranges[:-1]} == {10_000 // len(wide.columns)}
    assert {b - a for a, b in narrow.ranges[:-1]} == {1000}
    assert batches.batch_rows(1000) == 100  # never fewer than MIN_BATCH_ROWS
    streamed = traceconv.read(FIXED)
    assert _values(streamed).equals(_values(whole))
    out = tmp_path / "fixed.parquet"
    traceconv.convert(FIXED, out)
    assert _values(pq.read_table(out)).equals(_values(whole))


def test_a_table_that_fails_leaves_no_reading_thread_waiting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reading threads look up the calls of GPU rows only once the API calls are linked whole;
    when linking the calls fails half-way, the conversion stops with its error (no thread left
    waiting for the calls, no output written)."""
    import threading

    from traceconv.errors import InputError
    from traceconv.readers.nsys import batches, stream

    monkeypatch.setattr(batches, "BATCH_ROWS", 500)  # the calls in 12 batches, the kernels in 4
    db = traceconv.readers.nsys.sql.Database(FIXED)
    try:
        calls = batches.plan(db, RUNTIME, ["start"], ("start",)).ranges or []
    finally:
        db.close()
    assert len(calls) > 2
    links, seen = stream.Stream._links, []

    def failing(self: stream.Stream, named: Any, first_id: int, done: Any) -> Any:
        seen.append(named.part.table)
        if seen.count(RUNTIME) == len(calls):  # the last batch of calls: the kernels' batches wait for it
            raise InputError(FIXED, "a hand-made failure while linking the calls", "none")
        return links(self, named, first_id, done)

    monkeypatch.setattr(stream.Stream, "_links", failing)
    out = tmp_path / "fixed.parquet"
    got: list[BaseException] = []

    def convert() -> None:
        try:
            traceconv.convert(FIXED, out)
        except BaseException as exc:
            got.append(exc)

    runner = threading.Thread(target=convert, daemon=True)
    runner.start()
    runner.join(timeout=60)
    assert not runner.is_alive(), "the conversion hangs: a reading thread waits for the calls"
    assert len(got) == 1 and "hand-made failure" in str(got[0])
    assert KERNEL not in seen  # the failure came before the kernels were linked
    assert not out.exists() and not list(tmp_path.iterdir())
    assert not [t for t in threading.enumerate() if t.name.startswith("traceconv-sqlite")]


def test_a_table_that_holds_other_rows_than_its_count_is_an_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Rows are counted beside the reads; a table whose batches hold another number of rows than
    SQLite counts (the file changed while it was read) stops the conversion, nothing written."""
    count = traceconv.readers.nsys.sql.Database.count
    kernel = "CUPTI_ACTIVITY_KIND_KERNEL"
    monkeypatch.setattr(
        traceconv.readers.nsys.sql.Database, "count", lambda self, table: count(self, table) + (table == kernel)
    )
    with pytest.raises(InputError, match=f"table {kernel} changed while it was read"):
        traceconv.convert(FIXED, tmp_path / "fixed.parquet")
    assert not list(tmp_path.iterdir())
