"""Read-only access to an Nsight Systems SQLite export: tables, columns by name, fast bulk reads.

Columns move between Nsight Systems versions, so every read names its columns and keeps only
those the table has. Integer columns are read from the file's pages in numpy (:mod:`pages`),
batch by batch where its rows are ones that module reads exactly. Other bulk reads go straight
from SQLite to Arrow in C through ADBC
(``adbc-driver-sqlite``, a dependency). Without it, or where ADBC types a column otherwise
than the column declares (SQLite types each value, ADBC infers one type per column), SQLite
formats each chunk of rows as CSV text in C and Arrow's CSV reader parses it: about 2x slower
than ADBC, several times faster than building a Python tuple per row.
"""

from __future__ import annotations

import sqlite3
import threading
import urllib.parse
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from traceconv.errors import InputError
from traceconv.readers.nsys.csv_text import Line
from traceconv.readers.nsys.pages import Leaves, NotReadable, Pages

try:
    import adbc_driver_manager as adbc
    import adbc_driver_sqlite
except ImportError:  # the CSV path reads every export too
    adbc = None  # type: ignore[assignment]

CHUNK_ROWS = 1 << 18  # rows per SQL round trip: bounds the size of one CSV text
PAGES = True  # read integer columns from the file's pages where they can be (tests compare both ways)
DIRECT_BATCH_ROWS = 1 << 22  # most rows per ADBC batch (default 1,024): a column in few pieces, not hundreds
REEXPORT = "the export may be damaged; export the report again with `nsys export --type sqlite --force-overwrite true`"


def _uri(path: Path) -> str:
    return "file:" + urllib.parse.quote(str(path.resolve())) + "?mode=ro&immutable=1"


class Database:
    """One export opened read-only; errors become :class:`InputError` naming the file and table."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._local = threading.local()
        self._opened: list[Any] = []  # sqlite3 and ADBC connections, closed together
        self._lock = threading.Lock()
        self.use_pages = PAGES
        self.paged = 0  # reads answered from the pages (the others went through SQL)
        self._pages: Pages | None = None
        self._layouts: dict[str, _Layout | None] = {}
        self._extents: dict[str, tuple[int, int]] = {}
        try:
            rows = self.conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')").fetchall()
        except sqlite3.DatabaseError as exc:
            self.close()
            raise InputError(self.path, f"is not a readable SQLite database ({exc})", REEXPORT) from exc
        self.tables: frozenset[str] = frozenset(r[0] for r in rows)
        self._columns: dict[str, dict[str, str]] = {}
        self.replaced: dict[str, int] = {}  # table -> texts whose invalid UTF-8 was replaced (U+FFFD)

    @property
    def conn(self) -> sqlite3.Connection:
        """This thread's connection: tables are read in parallel, and SQLite works outside the GIL."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(_uri(self.path), uri=True, check_same_thread=False)
            conn.text_factory = lambda b: b.decode("utf-8", "replace")
            self._local.conn = conn
            with self._lock:
                self._opened.append(conn)
        return conn

    def _arrow_conn(self) -> Any:
        """This thread's ADBC connection (its own SQLite handle)."""
        conn = getattr(self._local, "adbc", None)
        if conn is None:
            database = adbc_driver_sqlite.connect(_uri(self.path))
            conn = adbc.AdbcConnection(database)
            self._local.adbc = conn
            with self._lock:
                self._opened += [conn, database]  # a connection closes before its database
        return conn

    def close(self) -> None:
        with self._lock:
            for conn in self._opened:
                conn.close()
            self._opened = []
            if self._pages is not None:
                self._pages.close()
                self._pages = None
            self.use_pages = False

    @contextmanager
    def guard(self, table: str) -> Iterator[None]:
        try:
            yield
        except (sqlite3.DatabaseError, pa.ArrowInvalid) as exc:
            raise InputError(self.path, f"table {table} cannot be read ({exc})", REEXPORT) from exc

    def has(self, table: str) -> bool:
        return table in self.tables

    def columns(self, table: str) -> dict[str, str]:
        """Column name -> declared type (upper case) of ``table``; empty when the table is absent."""
        if table not in self._columns:
            cols: dict[str, str] = {}
            if table in self.tables:
                with self.guard(table):
                    for row in self.conn.execute(f"PRAGMA table_info([{table}])"):
                        cols[row[1]] = (row[2] or "").upper()
            self._columns[table] = cols
        return self._columns[table]

    def count(self, table: str) -> int:
        if table not in self.tables:
            return 0
        with self.guard(table):
            return int(self.conn.execute(f"SELECT count(*) FROM [{table}]").fetchone()[0])

    def rows(self, table: str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """A small query's rows (metadata tables); ``table`` names the table in errors."""
        with self.guard(table):
            return self.conn.execute(sql, params).fetchall()

    def extent(self, table: str) -> tuple[int, int]:
        """(smallest, largest rowid) of ``table``, from the ends of its B-tree; (0, -1) when empty or absent."""
        if table not in self.tables:
            return 0, -1
        if table not in self._extents:  # asked for every batch read: once per table
            sql = f"SELECT (SELECT min(rowid) FROM [{table}]), (SELECT max(rowid) FROM [{table}])"
            with self.guard(table):
                lo, hi = self.conn.execute(sql).fetchone()
            self._extents[table] = (int(lo), int(hi)) if lo is not None else (0, -1)
        return self._extents[table]

    def read(self, table: str, wanted: Sequence[str], rows: tuple[int, int] | None = None, where: str = "") -> pa.Table:
        """The columns of ``wanted`` that ``table`` has, as typed Arrow columns, in rowid order:
        every row, or those whose rowid is in ``rows`` (``[lo, hi)``), or those ``where`` selects."""
        names, types = self._typed_names(table, wanted)
        if not names:
            return pa.table({})
        span = self.extent(table)
        if rows is not None:
            where = f"rowid >= {rows[0]} AND rowid < {rows[1]}"
            span = (max(span[0], rows[0]), min(span[1], rows[1] - 1))
        with self.guard(table):
            if not where or rows is not None:
                paged = self._from_pages(table, names, types, span)
                if paged is not None:
                    return paged
            direct = self._direct(table, names, types, where, span)
            if direct is not None:
                return direct
            line = Line(names, types)
            chunks = [line.parse(text) for text in self._chunks(table, line.sql, where)]
        self._count_replaced(table, line)
        if not chunks:
            return pa.table({c: pa.array([], types[c]) for c in names})
        return pa.concat_tables(chunks)

    def read_sorted(self, table: str, wanted: Sequence[str], key: str, batch: int) -> Iterator[pa.Table]:
        """The columns of ``wanted``, ``batch`` rows at a time, ordered by ``key`` then rowid
        (a table that is not in order already: SQLite sorts it, spilling to disk)."""
        names, types = self._typed_names(table, wanted)
        if not names:
            return
        line = Line(names, types)
        with self.guard(table):
            cursor = self.conn.execute(f"SELECT CAST({line.sql} AS BLOB) FROM [{table}] ORDER BY {key}, rowid")
            while rows := cursor.fetchmany(batch):
                yield line.parse(b"\n".join(r[0] for r in rows))
                self._count_replaced(table, line)

    def _typed_names(self, table: str, wanted: Sequence[str]) -> tuple[list[str], dict[str, pa.DataType]]:
        have = self.columns(table)
        names = [c for c in wanted if c in have]
        return names, {c: affinity(have[c]) for c in names}

    def _count_replaced(self, table: str, line: Line) -> None:
        if line.replaced:
            with self._lock:
                self.replaced[table] = self.replaced.get(table, 0) + line.replaced
            line.replaced = 0

    def _from_pages(
        self, table: str, names: list[str], types: dict[str, pa.DataType], span: tuple[int, int]
    ) -> pa.Table | None:
        """The rows with rowids in ``span`` (inclusive) from the file's pages (:mod:`pages`), or None
        where a column is not an integer column or a row is not one that module reads exactly."""
        if not self.use_pages or any(t != pa.int64() for t in types.values()):
            return None
        layout = self._layout(table)
        if layout is None or self._pages is None:
            return None
        try:
            got = self._pages.rows(
                layout.leaves, span[0], span[1] + 1, layout.columns, [layout.index[c] for c in names], layout.alias
            )
        except NotReadable:
            return None
        if got is None:
            return None
        with self._lock:
            self.paged += 1
        return got.rename_columns(names)

    def _layout(self, table: str) -> _Layout | None:
        """Where ``table``'s rows are and how they are laid out (None: not read from pages)."""
        with self._lock:
            if table in self._layouts:
                return self._layouts[table]
        layout = None
        try:
            layout = self._find_layout(table)
        except (NotReadable, OSError, sqlite3.DatabaseError):
            layout = None
        with self._lock:
            self._layouts[table] = layout
        return layout

    def _find_layout(self, table: str) -> _Layout | None:
        found = self.conn.execute(
            "SELECT type, rootpage, sql FROM sqlite_master WHERE name = ? AND type = 'table'", (table,)
        ).fetchone()
        if found is None or not isinstance(found[1], int) or found[1] <= 0:
            return None  # a view, or a virtual table
        if "WITHOUT ROWID" in " ".join(str(found[2] or "").upper().split()):
            return None
        info = self.conn.execute(f"PRAGMA table_xinfo([{table}])").fetchall()
        if any(row[6] for row in info):  # hidden or generated columns are not in the records
            return None
        keys = [row for row in info if row[5]]
        # A column declared exactly INTEGER PRIMARY KEY is the rowid itself, stored as NULL.
        alias = keys[0][0] if len(keys) == 1 and str(keys[0][2]).upper() == "INTEGER" else None
        with self._lock:
            if self._pages is None:
                try:
                    self._pages = Pages(str(self.path))
                except NotReadable:
                    self.use_pages = False  # a WAL file: every read goes through SQL
                    return None
        return _Layout(self._pages.leaves(found[1]), len(info), {row[1]: row[0] for row in info}, alias)

    def _direct(
        self,
        table: str,
        names: list[str],
        types: dict[str, pa.DataType],
        where: str = "",
        span: tuple[int, int] = (0, 0),
    ) -> pa.Table | None:
        """The rows through ADBC (``span``: the smallest and largest rowid they can have), or None
        when ADBC is missing, fails, or types a column otherwise than its declared affinity (then
        the CSV path reads them, with its exact conversions)."""
        if adbc is None:
            return None
        batch_rows = _batch_rows(span)
        where = f" WHERE {where}" if where else ""
        try:
            stmt = adbc.AdbcStatement(self._arrow_conn())
            try:
                stmt.set_options(**{"adbc.sqlite.query.batch_rows": str(batch_rows)})
                stmt.set_sql_query(f"SELECT {', '.join(f'[{c}]' for c in names)} FROM [{table}]{where} ORDER BY rowid")
                stream, _ = stmt.execute_query()
                reader = pa.RecordBatchReader.from_stream(stream)
                got = pa.Table.from_batches([_compact(b, batch_rows) for b in reader], reader.schema)
            finally:
                stmt.close()
        except (adbc.Error, OSError, pa.ArrowException):
            return None
        return _typed(got, types)

    def _chunks(self, table: str, line: str, where: str) -> Iterator[bytes]:
        lo, hi = self.conn.execute(
            f"SELECT min(rowid), max(rowid) FROM [{table}]" + (f" WHERE {where}" if where else "")
        ).fetchone()
        if lo is None:
            return
        sql = (
            f"SELECT CAST(group_concat(line, char(10)) AS BLOB) FROM "
            f"(SELECT {line} AS line FROM [{table}] WHERE rowid >= ? AND rowid < ?{f' AND ({where})' if where else ''})"
        )
        for first in range(lo, hi + 1, CHUNK_ROWS):
            (text,) = self.conn.execute(sql, (first, first + CHUNK_ROWS)).fetchone()
            if text:
                yield text


@dataclass(frozen=True)
class _Layout:
    """A table as :mod:`pages` reads it: its leaves, its number of columns, each column's place in
    a row (its ``cid``), and the place of the column that is the rowid (None: none is)."""

    leaves: Leaves
    columns: int
    index: dict[str, int]
    alias: int | None


def _batch_rows(extent: tuple[int, int]) -> int:
    """Rows per ADBC batch for rows whose rowids lie in ``extent``: ADBC gives each column of a
    batch room for this many rows up front, so a batch far larger than the rows reserves
    gigabytes of address space that a later ``fork`` is charged for. The rows are split evenly
    into batches of at most ``DIRECT_BATCH_ROWS``."""
    span = max(extent[1] - extent[0] + 1, 1)
    pieces = -(-span // DIRECT_BATCH_ROWS)
    return max(1024, -(-span // pieces))


def _compact(batch: pa.RecordBatch, batch_rows: int) -> pa.RecordBatch:
    """``batch`` in buffers of its own size where it fills less than half of the room ADBC gave it
    (a ``WHERE`` that keeps few rows, a last batch): the spare room is released with the copy."""
    if batch.num_rows >= batch_rows // 2 or batch_rows <= 1 << 16:
        return batch
    return batch.take(np.arange(batch.num_rows))


def _typed(got: pa.Table, types: dict[str, pa.DataType]) -> pa.Table | None:
    """``got`` in the declared types, or None where a column holds values of another type.

    A column with no value at all comes as int64 (ADBC's guess); text must be valid UTF-8,
    as the CSV reader requires.
    """
    cols = []
    for name, typ in types.items():
        col = got[name]
        if col.null_count == len(col) and col.type != typ:
            col = pa.nulls(len(col), typ)
        if col.type != typ:
            return None
        if typ == pa.string():
            try:
                col.validate(full=True)
            except pa.ArrowInvalid:
                return None
        cols.append(col)
    return pa.table(cols, names=list(types))


def affinity(declared: str) -> pa.DataType:
    """SQLite's type affinity rules, as Arrow types (an untyped column is read as text)."""
    if "INT" in declared:
        return pa.int64()
    if any(k in declared for k in ("REAL", "FLOA", "DOUB")):
        return pa.float64()
    return pa.string()
