"""The unified events of an input as one DuckDB view, ``events``: what every analysis queries.

Parquet files (a traceconv file, a dataset directory, several of them) are read where they
lie: a query reads only the columns and row groups it needs, and DuckDB aggregates, sorts and
joins within a bounded memory budget, spilling to a temporary folder beyond it. An Arrow table
in memory (``traceconv.read``) is queried in place. DuckDB runs on every core.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa

from traceconv import schema as S
from traceconv.errors import ResourceError, UsageError
from traceconv.process import available_memory

# DuckDB's working memory. By default it starts small, so that an analysis stays flat as traces
# grow (bench/README.md: 96 MB against 128 MB and 256 MB), and a statement that does not fit it
# even on one thread runs again with twice the budget, up to GROWN_MAX_MB or half the available memory.
# TRACECONV_MEMORY fixes the budget: no growth.
_SETTING = os.environ.get("TRACECONV_MEMORY", "").strip()  # set but empty: as if unset
MEMORY_LIMIT = _SETTING or "96MB"
MEMORY_GROWS = not _SETTING
GROWN_MAX_MB = 4096
METADATA_PARTS = 8  # Source.trace_metadata: the parts of a dataset directory whose metadata is read
FEW_WINDOWS = 8  # Source.within: windows tested by comparisons in SQL, not by a join with a table of them
WINDOW_BUCKETS = 4  # Source.within: the time buckets of a table of windows, per window


class Source:
    """An input's events as the view ``events`` (columns of the unified schema) on a DuckDB connection."""

    def __init__(self, data: pa.Table | Sequence[Path], name: str = "") -> None:
        self.name = name
        self._data = data  # where trace_metadata() reads the inputs' own metadata
        self._closers: list[Callable[[], object]] = []
        self._kept: dict[str, Any] = {}
        # One working folder per Source (processes never share one): the database file that holds the
        # tables analyses materialise (written out, so that its pages can leave memory) and DuckDB's
        # spill files; removed on close or, for a Source nobody closed, when it is collected or Python exits.
        work = tempfile.mkdtemp(prefix="traceconv-duckdb-")
        self.on_close(weakref.finalize(self, shutil.rmtree, work, True))
        self.threads = os.cpu_count() or 1
        self.memory = MEMORY_LIMIT  # the budget now (it grows only from the default)
        self.grows = MEMORY_GROWS
        self.con = duckdb.connect(os.path.join(work, "work.duckdb"), config={"threads": self.threads})
        try:
            self.con.execute(f"SET memory_limit = '{_quoted(self.memory)}'")
        except duckdb.Error as exc:  # only TRACECONV_MEMORY can be wrong here
            self.close()
            raise UsageError(
                None,
                f"TRACECONV_MEMORY={self.memory!r} is not a memory size ({query_error(exc)})",
                "set it like TRACECONV_MEMORY=2GB, or unset it for the default budget",
            ) from exc
        self.run(f"SET temp_directory = '{_quoted(os.path.join(work, 'spill'))}'")
        self.run("SET preserve_insertion_order = false")
        # The database file is scratch, removed with the Source: its writes need not wait for the disk.
        with contextlib.suppress(duckdb.Error):  # a DuckDB without the setting: its default
            self.run("SET fsync_mode = 'none'")
        # Each query over the view would read and decode the Parquet footers again (tens of ms for a
        # file of hundreds of row groups); DuckDB keeps them, checked against the file's modification time.
        self.run("SET parquet_metadata_cache = true")
        # DuckDB draws a progress bar on stdout for a long query where Python looks interactive
        # (python -c, notebooks): it would land inside the output of `traceconv sql` and the summaries.
        self.run("SET enable_progress_bar = false")
        # Sums of int64 are HUGEINT in DuckDB: back to int64 nanoseconds and bytes.
        self.run("CREATE MACRO total(x) AS CAST(coalesce(sum(x), 0) AS BIGINT)")
        self.run("CREATE MACRO isum(x) AS CAST(sum(x) AS BIGINT)")
        if isinstance(data, pa.Table):
            self.columns = tuple(data.column_names)
            self.con.register("events_table", data)
            self.run("CREATE VIEW events AS SELECT * FROM events_table")
        else:
            scan = f"({_parquet_view(data)})"
            have = {str(row[0]) for row in self.con.execute(f"DESCRIBE SELECT * FROM {scan}").fetchall()}
            self.columns = S.NAMES
            self.run(f"CREATE VIEW events AS SELECT {_columns(have)} FROM {scan}")

    def run(self, sql: str, params: Sequence[Any] | None = None) -> None:
        """A statement whose result nobody reads, run to its end."""
        with self._memory_errors():
            self._alone_if_needed(lambda: self.con.execute(sql, params or []).fetchall())

    def _alone_if_needed(self, call: Callable[[], Any]) -> Any:
        """``call``; where DuckDB runs out of its memory budget, ``call`` once more on one thread (each
        thread holds sort runs and hash tables of its own: slower, but within the budget where many
        threads share a small one), then, where the budget may grow, with twice the budget (kept for
        the statements after). A failed statement changed nothing, so it can run again."""
        while True:
            try:
                return self._on_one_thread_if_needed(call)
            except duckdb.OutOfMemoryException:
                if not self._grow():
                    raise

    def _on_one_thread_if_needed(self, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except duckdb.OutOfMemoryException:
            if self.threads == 1:
                raise
        self.con.execute("SET threads = 1")
        try:
            return call()
        finally:
            self.con.execute(f"SET threads = {self.threads}")

    def _grow(self) -> bool:
        """Double the default budget, within GROWN_MAX_MB and half the available memory; False where
        it may not grow (TRACECONV_MEMORY set, or at its ceiling)."""
        if not self.grows:
            return False
        now = int(self.memory.removesuffix("MB"))  # the default's form, the only one that grows
        bigger = min(now * 2, GROWN_MAX_MB, available_memory() // 2 // 10**6)  # the ceiling itself, last
        if bigger * 4 < now * 5:  # under a quarter more: not worth running the statement again
            return False
        self.memory = f"{bigger}MB"
        self.con.execute(f"SET memory_limit = '{self.memory}'")
        return True

    @contextlib.contextmanager
    def fixed_budget(self, fixed: bool = True) -> Iterator[None]:
        """Statements that may not grow the budget (``fixed``): where the caller has a leaner way
        of its own to try first when they run out of it."""
        grows, self.grows = self.grows, self.grows and not fixed
        try:
            yield
        finally:
            self.grows = grows

    @contextlib.contextmanager
    def _memory_errors(self) -> Iterator[None]:
        """DuckDB out of its memory budget: a one-line error that says how to give it more."""
        try:
            yield
        except duckdb.OutOfMemoryException as exc:
            raise ResourceError(
                None,
                f"the analysis needs more than {self._budget()} ({query_error(exc)})",
                "set TRACECONV_MEMORY higher (e.g. TRACECONV_MEMORY=8GB) and run it again",
            ) from exc

    def _budget(self) -> str:
        if MEMORY_GROWS:
            return f"{self.memory} of memory (the most that the default budget grows to here)"
        return f"TRACECONV_MEMORY={self.memory}"

    def has(self, column: str) -> bool:
        return column in self.columns

    def arrow(self, sql: str, params: Sequence[Any] | None = None) -> pa.Table:
        with self._memory_errors():
            rel: Any = self.con.sql(sql, params=list(params) if params else None)
            if rel is None:  # a statement without a result
                return pa.table({})
            fetch = getattr(rel, "to_arrow_table", None) or rel.arrow  # DuckDB 2 renamed it
            result: pa.Table = self._alone_if_needed(fetch)
        return result

    def frame(self, sql: str, params: Sequence[Any] | None = None) -> pd.DataFrame:
        """A query's result as pandas (nullable integers stay integers)."""
        table = self.arrow(sql, params)
        out: pd.DataFrame = table.to_pandas(types_mapper=_nullable)
        return out

    def scalar(self, sql: str, params: Sequence[Any] | None = None) -> Any:
        with self._memory_errors():
            rows = self._alone_if_needed(lambda: self.con.execute(sql, params or []).fetchall())
        return rows[0][0] if rows else None

    def batches(self, sql: str, rows: int = 1 << 18) -> Iterator[pa.RecordBatch]:
        """A query's result a bounded batch at a time, in its order."""
        with self._memory_errors():
            rel: Any = self.con.sql(sql)
            if rel is None:  # a statement without a result
                return
            reader: pa.RecordBatchReader = self._alone_if_needed(
                lambda: rel.to_arrow_reader(rows) if hasattr(rel, "to_arrow_reader") else rel.fetch_arrow_reader(rows)
            )
            yield from reader

    def table(self, name: str, sql: str, params: Sequence[Any] | None = None) -> None:
        """Materialise a query as a table of the Source's own database file (its pages leave memory when needed)."""
        self.run(f"CREATE OR REPLACE TABLE {name} AS {sql}", params)

    def within(self, name: str, starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64]) -> Within:
        """The test of whether a time lies in one of the sorted, disjoint windows ``[starts[i], ends[i]]``,
        as SQL (:class:`Within`). A few windows are a macro of comparisons, ``name(t)``; more, the table
        ``name`` of the windows per time bucket, joined on the bucket of the time (a hash join that
        probes a window or two a row: a Python function, or an ASOF join that sorts the rows, took
        several times longer over millions of rows)."""
        self.run(f"DROP MACRO IF EXISTS {name}")
        self.run(f"DROP TABLE IF EXISTS {name}")
        if not len(starts) or len(starts) <= FEW_WINDOWS:  # no windows: the macro that holds no time
            tests = " OR ".join(f"t BETWEEN {int(a)} AND {int(b)}" for a, b in zip(starts, ends, strict=True))
            self.run(f"CREATE MACRO {name}(t) AS ({tests or 't <> t'})")  # null for null, as the join's test
            return Within(name, None)
        # About four buckets a window on average: each window is a row per bucket it touches.
        width = max(1, (int(ends[-1]) - int(starts[0])) // (WINDOW_BUCKETS * len(starts)))
        self.register(f"{name}_windows", pa.table({"s": starts, "e": ends}))
        # Integer division is monotonic, so a time in [s, e] falls in a bucket of s's to e's, in DuckDB's
        # own arithmetic (the same the join uses).
        self.table(name, f"SELECT unnest(range(s // {width}, e // {width} + 1)) AS bucket, s, e FROM {name}_windows")
        self.con.unregister(f"{name}_windows")
        return Within(name, width)

    @contextlib.contextmanager
    def in_order(self) -> Iterator[None]:
        """Queries read inside it give their rows in the order of their input (a scan: the file's),
        which the Source otherwise leaves to DuckDB (faster)."""
        self.run("SET preserve_insertion_order = true")
        try:
            yield
        finally:
            self.run("SET preserve_insertion_order = false")

    def kept(self, key: str, make: Callable[[], Any]) -> Any:
        """``make()``, made once per Source: what several analyses read of the same input."""
        if key not in self._kept:
            self._kept[key] = make()
        return self._kept[key]

    def formats(self) -> tuple[Any, ...]:
        """The distinct values of the events' ``source`` column (the tools they came from, null
        included), read once per Source."""

        def read() -> tuple[Any, ...]:
            return tuple(self.arrow("SELECT DISTINCT source FROM events")["source"].to_pylist())

        got: tuple[Any, ...] = self.kept("formats", read)
        return got

    def trace_metadata(self) -> list[dict[str, Any]]:
        """Each input's trace-level metadata (Kineto's ``deviceProperties``, Nsight Systems' ``gpus`` ...),
        from the Parquet footers (a dataset directory: its first parts) or a table's schema; read once."""

        def read() -> list[dict[str, Any]]:
            if isinstance(self._data, pa.Table):
                raw = (self._data.schema.metadata or {}).get(S.META_TRACE)
                return [_loaded(raw)] if raw else []
            from traceconv import dataset, io

            files: list[Path] = []
            for path in map(Path, self._data):
                files += dataset.parts(path)[:METADATA_PARTS] if path.is_dir() else [path]
            return [io.trace_metadata(f)["trace"] for f in files]

        got: list[dict[str, Any]] = self.kept("trace_metadata", read)
        return got

    def register(self, name: str, data: pa.Table | pd.DataFrame) -> None:
        """A table of ours in memory (windows, name labels, the trees' sums per range) that queries can join."""
        self.con.register(name, data)

    def on_close(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` when the Source is closed (remove the files it was made of ...)."""
        self._closers.append(callback)

    def close(self) -> None:
        self.con.close()
        while self._closers:
            self._closers.pop()()

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class Within:
    """Whether a time lies in the windows of :meth:`Source.within`, as SQL: ``join(t)`` goes after
    the rows' FROM (nothing for a macro), then ``test(t)`` is the answer (null or false where not;
    ``t`` qualified by the rows' alias). A query joins one ``Within`` of a name at most once."""

    name: str
    width: int | None  # the table's time buckets; None: the macro

    def join(self, time: str) -> str:
        if self.width is None:
            return ""
        w = self.name
        return f" LEFT JOIN {w} ON {w}.bucket = {time} // {self.width} AND {time} BETWEEN {w}.s AND {w}.e"

    def test(self, time: str) -> str:
        return f"{self.name}({time})" if self.width is None else f"{self.name}.s IS NOT NULL"


def run_query(source: Source, sql: str, rows: int = 1 << 16) -> Iterator[pa.RecordBatch]:
    """A user's query, its result a batch at a time; a query DuckDB refuses is a one-line UsageError."""
    try:
        yield from source.batches(sql, rows)
    except duckdb.Error as exc:
        if isinstance(exc, duckdb.OutOfMemoryException):
            raise
        raise UsageError(
            None,
            f"the query failed: {query_error(exc)}",
            f'the inputs are the view events; `traceconv sql "DESCRIBE events" {source.name}` lists its columns',
        ) from exc


def query_error(exc: duckdb.Error) -> str:
    """DuckDB's message for a user's query on one line (it spans several, with a caret under the place)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip() and set(line.strip()) != {"^"}]
    return "; ".join(lines)


# DuckDB's names of the schema's Arrow types (a dictionary column reads as VARCHAR).
_SQL_TYPES = {pa.int32(): "INTEGER", pa.int64(): "BIGINT", pa.float64(): "DOUBLE", pa.string(): "VARCHAR"}


def _columns(have: set[str]) -> str:
    """``*`` where the files have every column of the schema; else (files of an earlier schema
    version, :data:`traceconv.schema.READABLE_VERSIONS`) the schema's columns, those missing as nulls."""
    if set(S.NAMES) <= have:
        return "*"
    return ", ".join(
        f'"{c.name}"' if c.name in have else f'CAST(NULL AS {_SQL_TYPES.get(c.type, "VARCHAR")}) AS "{c.name}"'
        for c in S.COLUMNS
    )


def _parquet_view(paths: Sequence[Path]) -> str:
    """Parquet files, and partitioned datasets (directories: :mod:`traceconv.dataset`) read with
    hive partitioning, so that a filter on the partition key skips the other partitions' files.
    A dataset's parts share one schema (its ``_common_metadata``): DuckDB binds the view from the
    first part's footer instead of reading every footer, as ``union_by_name`` would."""
    from traceconv import dataset

    files = [p for p in paths if not Path(p).is_dir()]
    reads = [f"read_parquet([{', '.join(literal(p) for p in files)}], union_by_name = true)"] if files else []
    types = f"{{'{dataset.PARTITION}': INTEGER}}"  # the schema's rank, int32, whatever the path says
    for folder in (Path(p) for p in paths if Path(p).is_dir()):
        parts = literal(folder / dataset.PART_GLOB)
        reads.append(f"read_parquet({parts}, hive_partitioning = true, hive_types = {types})")
    return " UNION ALL BY NAME ".join(f"SELECT * FROM {r}" for r in reads)


def literal(path: Path | str) -> str:
    """A text (a path, a name) as an SQL string literal."""
    return f"'{_quoted(str(path))}'"


def literals(texts: Iterable[str]) -> str:
    """Texts as a comma-separated list of SQL string literals (for ``IN (...)``; empty for none)."""
    return ", ".join(literal(t) for t in texts)


def one_of(column: str, texts: Iterable[str]) -> str:
    """SQL: whether ``column`` is one of ``texts`` (null where it is null); ``false`` for no texts (then the
    column is not even read). A test against the few distinct values a column holds, found once, not a
    text function on each of millions of rows."""
    listed = sorted(set(texts))
    return f"{column} IN ({literals(listed)})" if listed else "false"


def _quoted(text: str) -> str:
    return text.replace("'", "''")


def _loaded(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _nullable(typ: pa.DataType) -> Any:
    if pa.types.is_integer(typ):
        return {8: pd.Int8Dtype(), 16: pd.Int16Dtype(), 32: pd.Int32Dtype(), 64: pd.Int64Dtype()}[typ.bit_width]
    return None
