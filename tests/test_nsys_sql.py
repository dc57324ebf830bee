"""The two ways of reading an export's tables give the same Arrow tables.

``adbc-driver-sqlite`` reads SQLite straight into Arrow; without it, or where it types a
column otherwise than the column declares, SQLite writes CSV text that Arrow parses. Every
export of the corpus must convert to the same table either way, and the hand-made database
below holds what no export has (a column of mixed types, an untyped one, text with quotes
and line breaks) to pin how the fast path hands such tables to the fallback.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import traceconv
from traceconv import schema as S
from traceconv import writing
from traceconv.errors import InputError
from traceconv.readers.nsys import sql as nsys_sql
from traceconv.readers.nsys.sql import Database

from .conftest import fixture, real_files

EXPORTS = real_files("nsys", ("*.sqlite",))
FIXED = fixture("nsys/h200/fixed.sqlite")
needs_adbc = pytest.mark.skipif(nsys_sql.adbc is None, reason="adbc-driver-sqlite is not installed")


@pytest.fixture
def csv_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nsys_sql, "adbc", None)
    monkeypatch.setattr(nsys_sql, "PAGES", False)


def _read_csv_only(path: Path) -> pa.Table:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(nsys_sql, "adbc", None)
        mp.setattr(nsys_sql, "PAGES", False)
        return traceconv.read(path)


@needs_adbc
@pytest.mark.parametrize("path", EXPORTS, ids=lambda p: p.name[:45])
def test_every_export_converts_the_same_without_adbc(path: Path) -> None:
    fast, fallback = traceconv.read(path), _read_csv_only(path)
    assert fast.equals(fallback, check_metadata=True)


@pytest.fixture
def hand_made(tmp_path: Path) -> Path:
    """Hand-made: one table of each kind of column an export could hold."""
    path = tmp_path / "types.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE t (i INTEGER, r REAL, s TEXT, never INTEGER, loose, mixed INTEGER)")
        rows = [(n, n / 3, f"it's\nline {n} \u00e9", None, n, n) for n in range(2000)]
        db.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?, ?)", rows)
        db.execute("INSERT INTO t VALUES (NULL, NULL, '', NULL, NULL, NULL)")
    return path


def _read(path: Path, columns: list[str]) -> pa.Table:
    db = Database(path)
    try:
        return db.read("t", columns)
    finally:
        db.close()


@needs_adbc
def test_declared_types_and_values_are_the_same_both_ways(hand_made: Path) -> None:
    columns = ["i", "r", "s", "never", "loose"]
    fast = _read(hand_made, columns)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(nsys_sql, "adbc", None)
        fallback = _read(hand_made, columns)
    assert fast.schema == fallback.schema
    assert [fast.schema.field(c).type for c in columns] == [
        pa.int64(),
        pa.float64(),
        pa.string(),
        pa.int64(),
        pa.string(),
    ]
    assert fast.equals(fallback)
    assert fast["s"][0].as_py() == "it's\nline 0 \u00e9" and fast["s"][2000].as_py() == ""
    assert fast["loose"][5].as_py() == "5"  # an untyped column is text: ADBC's int64 goes to the fallback


@needs_adbc
def test_a_column_of_another_type_goes_to_the_fallback(hand_made: Path) -> None:
    with sqlite3.connect(hand_made) as db:
        db.execute("UPDATE t SET mixed = 2.5 WHERE rowid = 1999")  # one real among integers
    db = Database(hand_made)
    try:
        assert db._direct("t", ["mixed"], {"mixed": pa.int64()}) is None
        with pytest.raises(InputError, match=r"types\.sqlite: table t cannot be read"):
            db.read("t", ["mixed"])  # the CSV path's verdict, as before ADBC
    finally:
        db.close()


@needs_adbc
def test_batches_and_filters_read_what_one_batch_reads(hand_made: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    columns = ["i", "r", "s", "never"]
    whole = _read(hand_made, columns)
    monkeypatch.setattr(nsys_sql, "DIRECT_BATCH_ROWS", 700)  # 2,001 rows in 2 batches of 1,024 rows' room
    assert _read(hand_made, columns).equals(whole)
    db = Database(hand_made)
    try:
        few = db.read("t", columns, where="i % 100 = 0")
        none = db.read("t", columns, where="i < 0")
    finally:
        db.close()
    assert few.equals(whole.filter(pa.array([i is not None and i % 100 == 0 for i in whole["i"].to_pylist()])))
    assert none.num_rows == 0 and none.schema == whole.schema


def _address_space_mib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) >> 10
    raise AssertionError("no VmSize in /proc/self/status")


@needs_adbc
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads Linux's /proc")
def test_a_table_read_holds_no_more_address_space_than_it_needs() -> None:
    """ADBC gives each column of a batch room for all the batch's rows up front: batches far larger
    than the table kept about 3 GB of address space per read of fixed.sqlite alive with the table,
    and the test processes that kept a few such tables could no longer fork (ENOMEM)."""
    traceconv.read(FIXED)  # the libraries and their thread pools in place first
    before = _address_space_mib()
    kept = [traceconv.read(FIXED) for _ in range(3)]
    grown = _address_space_mib() - before
    assert grown < 400, f"{grown} MiB more address space for 3 tables of {kept[0].nbytes >> 20} MiB each"


def test_the_fallback_reads_every_table_alone(hand_made: Path, csv_only: None) -> None:
    table = _read(hand_made, ["i", "r", "s"])
    assert table.num_rows == 2001 and table["i"].null_count == 1 and table["r"][3].as_py() == 1.0


def test_statistics_only_on_the_columns_users_filter_on(tmp_path: Path) -> None:
    assert set(writing.STATISTICS_COLUMNS) <= set(S.NAMES)
    out = tmp_path / "fixed.parquet"
    traceconv.convert(FIXED, out)
    group = pq.read_metadata(out).row_group(0)
    with_stats = {group.column(i).path_in_schema for i in range(group.num_columns) if group.column(i).is_stats_set}
    assert with_stats == set(writing.STATISTICS_COLUMNS)


def test_an_exports_args_are_written_with_dictionary_pages(tmp_path: Path) -> None:
    """The args of an export repeat (a few launch configurations): dictionary pages, the same values."""
    out = tmp_path / "fixed.parquet"
    traceconv.convert(FIXED, out)
    meta = pq.read_metadata(out)
    args = S.NAMES.index("args")
    chunks = [meta.row_group(g).column(args) for g in range(meta.num_row_groups)]
    assert chunks and all(c.has_dictionary_page for c in chunks)
    assert pq.read_table(out, columns=["args"]).column(0).equals(traceconv.read(FIXED).column("args"))
    kineto = tmp_path / "buggy.parquet"  # a PyTorch trace's args do not repeat: no dictionary tried
    traceconv.convert(fixture("pytorch/h200/train_buggy.pt.trace.json.gz"), kineto, workers=0)
    assert not pq.read_metadata(kineto).row_group(0).column(args).has_dictionary_page


def test_converting_imports_no_pandas(tmp_path: Path) -> None:
    code = (
        "import sys; from traceconv.cli import main\n"
        f"main(['nsys', {str(FIXED)!r}, '-o', {str(tmp_path / 'x.parquet')!r}], "
        "standalone_mode=False)\n"
        "assert 'pandas' not in sys.modules, 'pandas was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
