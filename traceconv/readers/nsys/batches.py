"""How an export's tables are read: in bounded batches of rows, in their event order, ahead of use.

A table of at most :data:`BATCH_ROWS` rows is read whole and put in order in memory. A larger
one is read :data:`BATCH_ROWS` rows at a time (fewer for a wide table: :func:`batch_rows`) by
rowid ranges, its rows taken to be stored in order (every export of the corpus): its batches are
checked as they are converted (:class:`KeyOrder`), and a table found out of order is read again,
through SQLite's ``ORDER BY`` (which sorts on disk), by a conversion started afresh
(:class:`Unordered`). Rowid ranges are read by :func:`reading_threads` threads at once, each with its own
SQLite connection (ADBC and SQLite work outside the GIL), up to :data:`AHEAD` batches ahead of the
one being linked; each thread also prepares the batches it reads (the conversion, the key's order,
what needs no other batch) and the prepared batches are handed over in order.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traceconv.readers.arrow_util import to_numpy
from traceconv.readers.nsys.sql import Database, affinity

BATCH_ROWS = 1 << 16  # rows per batch: bounds the memory of a table in flight
BATCH_VALUES = 1 << 19  # most values (rows x columns read) per batch of a wide table
MIN_BATCH_ROWS = 1 << 13
MAX_READERS = 2  # threads reading at once where the cores allow (:func:`reading_threads`)
AHEAD = 2  # batches read (and prepared) ahead of the one being linked
T = TypeVar("T")


@dataclass(frozen=True)
class Plan:
    """How one table is read: ``ranges`` of rowids in order (of ``check``, when it is said: the
    batches are checked), or whole (``None``), or sorted by SQLite (``key``)."""

    table: str
    columns: list[str]
    span: int  # rowids from the smallest to the largest: its rows, but for gaps (progress's estimate)
    ranges: list[tuple[int, int]] | None = None
    key: str | None = None
    check: str | None = None

    @property
    def whole(self) -> bool:
        return self.ranges is None and self.key is None


def plan(db: Database, table: str, columns: list[str], keys: tuple[str, ...], sort: bool = False) -> Plan:
    """The plan for ``table``, ordered by the first of ``keys`` it has (none: read whole, sorted in
    memory): by rowid ranges checked as they come, or sorted by SQLite when ``sort`` (the table was
    found out of order) or when the key is not an integer column among those read (no export
    has such a key: there is nothing to check the batches against)."""
    lo, hi = db.extent(table)
    have = db.columns(table)
    key = next((k for k in keys if k in have or k == "rowid"), None)
    rows = hi - lo + 1
    if key is None or hi - lo + 1 <= BATCH_ROWS:
        return Plan(table, columns, rows)
    step = batch_rows(len(columns))
    ranges = [(a, min(a + step, hi + 1)) for a in range(lo, hi + 1, step)]
    if key == "rowid":
        return Plan(table, columns, rows, ranges)
    if not sort and key in columns and affinity(have[key]) == pa.int64():
        return Plan(table, columns, rows, ranges, check=key)
    return Plan(table, columns, rows, key=f"[{key}]")


def batch_rows(columns: int) -> int:
    """Rows per batch of a table read by rowid ranges: :data:`BATCH_ROWS`, fewer for a wide table
    (at most :data:`BATCH_VALUES` values: a batch and what it becomes are held several at once)."""
    return max(min(BATCH_ROWS, BATCH_VALUES // max(columns, 1)), min(BATCH_ROWS, MIN_BATCH_ROWS))


def reading_threads() -> int:
    """Threads that read and prepare batches at once: :data:`MAX_READERS`, but one on two cores
    or fewer, where the thread that links the batches and the writer's thread keep the other
    core busy (a second reader there made it no faster, with a third more memory in flight)."""
    return MAX_READERS if _cores() > 2 else 1


def _cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class Unordered(Exception):
    """A table read by rowid ranges turned out not to be in the order of its key."""

    def __init__(self, table: str) -> None:
        super().__init__(table)
        self.table = table


@dataclass(frozen=True)
class Run:
    """What :class:`KeyOrder` needs of one batch's key column (made where the batch is read)."""

    rows: int
    ordered: bool  # the key is there, its nulls come first and its values do not go down
    leading_null: bool  # the first row has no value
    first: int | None = None  # the first and last values (None: no row has one)
    last: int | None = None

    @classmethod
    def of(cls, batch: pa.Table, key: str) -> Run:
        if batch.num_rows == 0:
            return cls(0, True, False)
        if key not in batch.column_names:
            return cls(batch.num_rows, False, False)
        col = batch[key]
        values = to_numpy(col)
        leading_null = False
        if col.null_count:
            valid = np.asarray(pc.is_valid(col).to_numpy(zero_copy_only=False), dtype=bool)
            if bool((valid[:-1] & ~valid[1:]).any()):  # a null after a value
                return cls(batch.num_rows, False, False)
            leading_null, values = not bool(valid[0]), values[valid]
        if len(values) == 0:
            return cls(batch.num_rows, True, leading_null)
        ordered = not bool((values[1:] < values[:-1]).any())
        return cls(batch.num_rows, ordered, leading_null, int(values[0]), int(values[-1]))


class KeyOrder:
    """Whether the batches of a table, one after another, keep the order that ``ORDER BY key,
    rowid`` gives (nulls first): then reading by rowid ranges reads them in that order."""

    def __init__(self, key: str) -> None:
        self.key = key
        self._valid_seen = False  # a row with a value came: no null may follow
        self._last = np.iinfo(np.int64).min

    def holds(self, batch: pa.Table) -> bool:
        return self.follows(Run.of(batch, self.key))

    def follows(self, run: Run) -> bool:
        """Whether the batch ``run`` sums up keeps the order after the batches before it."""
        if run.rows == 0:
            return True
        if not run.ordered or (self._valid_seen and run.leading_null):
            return False
        if run.first is None or run.last is None:
            return True
        if self._valid_seen and run.first < self._last:
            return False
        self._valid_seen, self._last = True, run.last
        return True


class Reads(Generic[T]):
    """The batches of every plan, in order, each handed to its plan's ``prepare`` where it is read:
    rowid ranges and whole tables are read and prepared ahead in threads (the work of a batch that
    needs no other batch leaves the thread that puts them in order)."""

    def __init__(self, db: Database, plans: list[Plan], prepare: list[Callable[[pa.Table], T]]) -> None:
        self._db = db
        # Each table's rows counted beside the reads (SQLite walks the whole table): the count is
        # needed only once the table has been read, to check that all of it was.
        self._counting = ThreadPoolExecutor(max_workers=1, thread_name_prefix="traceconv-count")
        self._counts = [self._counting.submit(db.count, p.table) for p in plans]
        self._jobs: deque[tuple[int, Callable[[], T]]] = deque()
        for i, (p, ready) in enumerate(zip(plans, prepare, strict=True)):
            if p.whole:
                self._jobs.append((i, partial(_prepared, ready, db.read, p.table, p.columns)))
            for rows in p.ranges or []:
                self._jobs.append((i, partial(_prepared, ready, db.read, p.table, p.columns, rows)))
        self._plans, self._prepare = plans, prepare
        self._pool = ThreadPoolExecutor(max_workers=reading_threads(), thread_name_prefix="traceconv-sqlite")
        self._pending: deque[tuple[int, Future[T]]] = deque()

    def _fill(self) -> None:
        while self._jobs and len(self._pending) < AHEAD:
            i, job = self._jobs.popleft()
            self._pending.append((i, self._pool.submit(job)))

    def batches(self, index: int) -> Iterator[T]:
        """The prepared batches of plan ``index``; plans are taken in order."""
        p = self._plans[index]
        if p.key is not None:
            for batch in self._db.read_sorted(p.table, p.columns, p.key, batch_rows(len(p.columns))):
                yield self._prepare[index](batch)
            return
        self._fill()
        while self._pending and self._pending[0][0] == index:
            _, future = self._pending.popleft()
            table = future.result()
            self._fill()
            yield table
            del table

    def rows(self, index: int) -> int:
        """The rows of plan ``index``'s table (SQLite's count)."""
        return self._counts[index].result()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._counting.shutdown(wait=True, cancel_futures=True)


def _prepared(prepare: Callable[[pa.Table], T], read: Callable[..., pa.Table], *args: Any) -> T:
    return prepare(read(*args))
