"""How an export's tables are read: in bounded batches of rows, in their event order, ahead of use.

A table of at most :data:`BATCH_ROWS` rows is read whole and put in order in memory. A larger
one is read :data:`BATCH_ROWS` rows at a time: by rowid ranges where its rows are already in
order (every export of the corpus; SQLite checks it without a sort), else through SQLite's
``ORDER BY`` (which sorts on disk). Rowid ranges are read by :data:`WORKERS` threads at once,
each with its own SQLite connection (ADBC and SQLite work outside the GIL), up to
:data:`AHEAD` batches ahead of the one being converted; the batches are handed over in order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

import pyarrow as pa

from traceconv.readers.nsys.sql import Database

BATCH_ROWS = 1 << 15  # rows per batch: bounds the memory of a table in flight
WORKERS = 2  # threads reading at once
AHEAD = 2  # batches read ahead of the one being converted


@dataclass(frozen=True)
class Plan:
    """How one table is read: ``ranges`` of rowids in order, or whole (``None``), or sorted by SQLite (``key``)."""

    table: str
    columns: list[str]
    rows: int
    ranges: list[tuple[int, int]] | None = None
    key: str | None = None

    @property
    def whole(self) -> bool:
        return self.ranges is None and self.key is None


def plan(db: Database, table: str, columns: list[str], keys: tuple[str, ...]) -> Plan:
    """The plan for ``table``, ordered by the first of ``keys`` it has (none: read whole, sorted in memory)."""
    lo, hi = db.extent(table)
    have = db.columns(table)
    key = next((k for k in keys if k in have or k == "rowid"), None)
    if key is None or hi - lo + 1 <= BATCH_ROWS:
        return Plan(table, columns, db.count(table))
    ranges = [(a, min(a + BATCH_ROWS, hi + 1)) for a in range(lo, hi + 1, BATCH_ROWS)]
    if key == "rowid":
        return Plan(table, columns, db.count(table), ranges)
    pairs, ordered = db.in_order(table, f"[{key}]")
    if pairs == hi - lo and ordered:  # no gap, in order
        return Plan(table, columns, hi - lo + 1, ranges)
    return Plan(table, columns, db.count(table), key=f"[{key}]")


class Reads:
    """The batches of every plan, in order; rowid ranges and whole tables are read ahead in threads."""

    def __init__(self, db: Database, plans: list[Plan]) -> None:
        self._db = db
        self._jobs: deque[tuple[int, Callable[[], pa.Table]]] = deque()
        for i, p in enumerate(plans):
            if p.whole:
                self._jobs.append((i, partial(db.read, p.table, p.columns)))
            for rows in p.ranges or []:
                self._jobs.append((i, partial(db.read, p.table, p.columns, rows)))
        self._plans = plans
        self._pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="traceconv-sqlite")
        self._pending: deque[tuple[int, Future[pa.Table]]] = deque()

    def _fill(self) -> None:
        while self._jobs and len(self._pending) < AHEAD:
            i, job = self._jobs.popleft()
            self._pending.append((i, self._pool.submit(job)))

    def batches(self, index: int) -> Iterator[pa.Table]:
        """The batches of plan ``index``; plans are taken in order."""
        p = self._plans[index]
        if p.key is not None:
            yield from self._db.read_sorted(p.table, p.columns, p.key, BATCH_ROWS)
            return
        self._fill()
        while self._pending and self._pending[0][0] == index:
            _, future = self._pending.popleft()
            table = future.result()
            self._fill()
            yield table
            del table

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
