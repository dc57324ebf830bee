"""Integer columns read from an export's pages equal what SQLite answers, or go through SQL.

Every table of every real export is read both ways, whole and in rowid ranges that cut its leaf
pages; the hand-made databases below hold what no export has (every width of integer, rowid
aliases, gaps, reals and texts in integer columns, rows older than a column, overflow pages, a
WAL file, a table without rowid) to pin where the page reader reads and where it hands over.
"""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pyarrow as pa
import pytest

import traceconv
from traceconv.errors import InputError
from traceconv.readers.nsys import sql as nsys_sql
from traceconv.readers.nsys.pages import NotReadable, Pages
from traceconv.readers.nsys.sql import Database, affinity

from .conftest import fixture, real_files

EXPORTS = real_files("nsys", ("*.sqlite",))
EVENT_TABLES = ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL")


def _integer_columns(db: Database, table: str) -> list[str]:
    return [c for c, declared in db.columns(table).items() if affinity(declared) == pa.int64()]


def _both_ways(
    path: Path, table: str, columns: list[str], rows: tuple[int, int] | None = None
) -> tuple[pa.Table, pa.Table, int]:
    """(from the pages where it can, through SQL alone, reads the pages answered)."""
    paged, plain = Database(path), Database(path)
    plain.use_pages = False
    try:
        got, want = paged.read(table, columns, rows), plain.read(table, columns, rows)
        return got, want, paged.paged
    finally:
        paged.close()
        plain.close()


@pytest.mark.parametrize("path", EXPORTS, ids=lambda p: Path(getattr(p, "values", [p])[0]).name[:45])
def test_every_table_of_every_export_reads_the_same_from_its_pages(path: Path) -> None:
    db = Database(path)
    try:
        tables = sorted(t for t in db.tables if _integer_columns(db, t))
        extents = {t: db.extent(t) for t in tables}
        columns = {t: _integer_columns(db, t) for t in tables}
    finally:
        db.close()
    paged_events = 0
    for table in tables:
        lo, hi = extents[table]
        cut = lo + (hi - lo) // 3 + 1  # two ranges that meet inside a leaf page
        for rows in (None, (lo, cut), (cut, hi + 1)):
            got, want, paged = _both_ways(path, table, columns[table], rows)
            assert got.equals(want), f"{table} {rows}"
            if table in EVENT_TABLES and rows is None:
                paged_events += paged
    if any(t in tables for t in EVENT_TABLES):
        assert paged_events, "the event tables were not read from their pages"


def test_a_conversion_from_the_pages_equals_one_through_sql(monkeypatch: pytest.MonkeyPatch) -> None:
    path = fixture("nsys/h200/fixed.sqlite")
    paged = traceconv.read(path)
    monkeypatch.setattr(nsys_sql, "PAGES", False)
    assert paged.equals(traceconv.read(path), check_metadata=True)


def _table(path: Path, create: str, rows: list[tuple[object, ...]]) -> Path:
    with closing(sqlite3.connect(path)) as db:
        db.execute(create)
        marks = ", ".join("?" * len(rows[0]))
        db.executemany(f"INSERT INTO t VALUES ({marks})", rows)
        db.commit()
    return path


EDGES = [
    0, 1, -1, 127, 128, -128, -129, 255, 32767, -32768, 32768, (1 << 23) - 1, -(1 << 23), 1 << 23,
    (1 << 31) - 1, -(1 << 31), 1 << 31, (1 << 47) - 1, -(1 << 47), 1 << 47, (1 << 63) - 1, -(1 << 63),
]  # fmt: skip


def test_hand_made_integers_of_every_width_and_nulls(tmp_path: Path) -> None:
    rows = [(v, None if i % 3 == 0 else -v if v > -(1 << 63) else 0, i % 2) for i, v in enumerate(EDGES * 300)]
    path = _table(tmp_path / "widths.sqlite", "CREATE TABLE t (a INTEGER, b INTEGER, c INTEGER)", rows)
    got, want, paged = _both_ways(path, "t", ["c", "a", "b"])
    assert paged == 1 and got.equals(want)
    assert got["a"].to_pylist() == [r[0] for r in rows] and got["b"].to_pylist() == [r[1] for r in rows]


def test_hand_made_rowid_alias_gaps_and_ranges(tmp_path: Path) -> None:
    rows = [(i * 7, i, i * i) for i in range(1, 20000)]
    path = _table(tmp_path / "alias.sqlite", "CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER, w INTEGER)", rows)
    with closing(sqlite3.connect(path)) as db:
        db.execute("DELETE FROM t WHERE v % 5 = 0")
        db.commit()  # gaps in the rowids, emptier pages
    for span in [None, (0, 7), (700, 7001), (7000, 140000), (139993, 10**9)]:
        got, want, paged = _both_ways(path, "t", ["v", "id", "w"], span)
        assert paged == 1 and got.equals(want), span
    got, _, _ = _both_ways(path, "t", ["id"], (0, 71))
    assert got["id"].to_pylist() == [7, 14, 21, 28, 42, 49, 56, 63]


def test_hand_made_rowids_of_every_varint_length_and_columns_of_one_serial_type(tmp_path: Path) -> None:
    # Varints of 1 to 9 bytes (negative rowids take 9); columns whose values in a batch all have
    # one serial type: only the constants 0 and 1, one width (8 bytes), all NULL.
    limits = {(1 << 63) - 1, -(1 << 63)}
    rowids = sorted({s * (1 << (7 * k)) + d for k in range(9) for d in (0, 1) for s in (1, -1)} | limits)
    rows = [(r, i % 2, (1 << 40) + i, None, 5) for i, r in enumerate(rowids)]
    schema = "CREATE TABLE t (id INTEGER PRIMARY KEY, flag INTEGER, wide INTEGER, empty INTEGER, small INTEGER)"
    path = _table(tmp_path / "varints.sqlite", schema, rows)
    got, want, paged = _both_ways(path, "t", ["wide", "id", "flag", "empty", "small"])
    assert paged == 1 and got.equals(want)
    assert got["id"].to_pylist() == rowids and got["empty"].null_count == len(rows)
    assert got["flag"].to_pylist() == [i % 2 for i in range(len(rows))]


@pytest.mark.parametrize(
    ("what", "value"),
    [("a real", 2.5), ("a text", "12x"), ("a blob", b"\x00\x01")],
)
def test_hand_made_other_values_in_an_integer_column_go_through_sql(tmp_path: Path, what: str, value: object) -> None:
    rows: list[tuple[object, ...]] = [(i, i) for i in range(3000)]
    rows[1500] = (1500, value)
    path = _table(tmp_path / "mixed.sqlite", "CREATE TABLE t (a INTEGER, b INTEGER)", rows)
    got, want, paged = _both_ways(path, "t", ["a"], (1, 1001))
    assert paged == 1 and got.equals(want)  # a batch without it is read from the pages
    db = Database(path)
    try:
        assert db._from_pages("t", ["b"], {"b": pa.int64()}, db.extent("t")) is None, what
        assert db._from_pages("t", ["a"], {"a": pa.int64()}, db.extent("t")) is not None  # other columns: read
    finally:
        db.close()


def test_hand_made_rows_older_than_a_column_go_through_sql(tmp_path: Path) -> None:
    path = _table(tmp_path / "altered.sqlite", "CREATE TABLE t (a INTEGER)", [(i,) for i in range(500)])
    with closing(sqlite3.connect(path)) as db:
        db.execute("ALTER TABLE t ADD COLUMN b INTEGER DEFAULT 42")  # the old rows do not hold it
        db.executemany("INSERT INTO t VALUES (?, ?)", [(i, -i) for i in range(500, 900)])
        db.commit()
    got, want, paged = _both_ways(path, "t", ["a", "b"])
    assert paged == 0 and got.equals(want) and got["b"][0].as_py() == 42
    got, want, paged = _both_ways(path, "t", ["a", "b"], (600, 900))  # only rows that hold every column
    assert paged == 1 and got.equals(want)


def test_hand_made_overflow_pages_go_through_sql(tmp_path: Path) -> None:
    rows = [(i, "x" * (9000 if i == 40 else 10)) for i in range(100)]  # one row longer than a page
    path = _table(tmp_path / "overflow.sqlite", "CREATE TABLE t (a INTEGER, s TEXT)", rows)
    got, want, paged = _both_ways(path, "t", ["a"])
    assert paged == 0 and got.equals(want)


def test_hand_made_wal_files_and_tables_without_rowid_go_through_sql(tmp_path: Path) -> None:
    path = tmp_path / "wal.sqlite"
    with closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE t (a INTEGER)")
        db.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(100)])
        db.execute("CREATE TABLE k (a INTEGER PRIMARY KEY, b INTEGER) WITHOUT ROWID")
        db.executemany("INSERT INTO k VALUES (?, ?)", [(i, i) for i in range(100)])
        db.commit()
    with pytest.raises(NotReadable, match="WAL"):
        Pages(str(path))
    got, want, paged = _both_ways(path, "t", ["a"])
    assert paged == 0 and got.equals(want) and got.num_rows == 100
    plain = tmp_path / "rollback.sqlite"
    shutil.copy(path, plain)
    with closing(sqlite3.connect(plain)) as db:
        db.execute("PRAGMA journal_mode=DELETE")
    got, want, paged = _both_ways(plain, "t", ["a"])
    assert paged == 1 and got.equals(want)
    db = Database(plain)
    try:
        assert db._layout("k") is None  # its rows are in an index B-tree
    finally:
        db.close()


def test_a_truncated_file_is_not_read_from_its_pages(tmp_path: Path) -> None:
    rows = [(i, i) for i in range(20000)]
    path = _table(tmp_path / "whole.sqlite", "CREATE TABLE t (a INTEGER, b INTEGER)", rows)
    with closing(sqlite3.connect(path)) as db:
        root = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 't'").fetchone()[0]
    cut = tmp_path / "cut.sqlite"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size * 2 // 3])
    pages = Pages(str(cut))
    try:
        with pytest.raises(NotReadable, match="shorter"):
            leaves = pages.leaves(root)
            pages.rows(leaves, 1, 20001, 2, [0, 1], None)
    finally:
        pages.close()
    with pytest.raises(InputError, match=r"cut\.sqlite: is not a readable SQLite database"):
        Database(cut)  # SQLite's own verdict, before any page is read
