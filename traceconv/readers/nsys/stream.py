"""The tables of an export, converted and linked a batch of rows at a time, in event-id order.

NVTX ranges are kept (thread, start, end, event id, name code) for the op links of the API
calls that follow; each batch of API calls goes to the :class:`~.launches.LaunchIndex` on disk
with what its GPU work takes from it (times, thread, name, NVTX range); each batch of GPU rows
looks its calls up there. Memory holds a few batches, the NVTX ranges and the index's keys.

The threads that read the batches also convert them, name their processes and threads, and,
once the NVTX table (for API calls) or the API calls (for GPU rows) are linked whole, look up
their ranges and calls; the thread that yields the tables keeps only what needs the batches
before it: the ranges and calls as they are added, event ids, notes' counts.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traceconv import schema as S
from traceconv.errors import InputError
from traceconv.process import return_freed_memory
from traceconv.readers.arrow_util import I64, identity, to_numpy
from traceconv.readers.base import Progress, TraceInfo
from traceconv.readers.nsys.batches import KeyOrder, Plan, Reads, Run, Unordered, plan
from traceconv.readers.nsys.graph_nodes import NodeOrigins, node_origins
from traceconv.readers.nsys.launches import Calls, LaunchIndex, nothing
from traceconv.readers.nsys.links import Ranges, Vocabulary, launch_columns
from traceconv.readers.nsys.meta import Names
from traceconv.readers.nsys.nvtx import NVTX
from traceconv.readers.nsys.parts import NO_TIME, NONE, Col, Part
from traceconv.readers.nsys.sources import Context, Source
from traceconv.readers.nsys.sql import Database
from traceconv.readers.nsys.tables import CUDA_EVENT, GRAPH, KERNEL, MEMCPY, MEMSET, OSRT, RUNTIME, SYNC, sync_types

GPU_TABLES = (KERNEL, MEMCPY, MEMSET, SYNC, GRAPH, CUDA_EVENT)  # rows with a correlation id to a launching call
GPU_ROWS = (KERNEL, MEMCPY, MEMSET)  # the schema's GPU kinds
CAPTURED = "{:,} GPU rows replayed from CUDA graphs belong to the NVTX range around their graph node's creation"
CONTRADICTED = (
    "{:,} synchronisation rows have a syncType code that contradicts "
    "their call (e.g. cudaStreamSynchronize coded as stream wait event): sync_type "
    "follows the call; the code is in args"
)


@dataclass
class _Part:
    """A converted batch with its process and thread names."""

    part: Part
    process_name: Col
    thread_name: Col
    op: tuple[I64, I64] | None = None  # API calls: (event id, name code) of their NVTX range
    calls: Calls | None = None  # GPU rows: the fields of their launching calls


@dataclass
class _Prepared:
    """A batch as its reading thread leaves it: converted and named, or as read (``batch``: a
    source whose conversion needs the batches before it); ``run``: its key's order, when checked."""

    run: Run | None
    named: _Part | None = None
    batch: pa.Table | None = None


@dataclass
class _Table:
    """What one table's batches add up to: rows, notes' counts, links' notes."""

    rows: int = 0
    tallies: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    contradicted: int = 0  # synchronisation rows whose code contradicts their call


class Stream:
    """Converts the ``sources`` present in ``ctx.db``, yielding one unified table per batch.

    ``sort``: the tables to read through SQLite's sort (found out of order before); a table read
    by rowid ranges that is not in order raises :class:`~.batches.Unordered`.
    """

    def __init__(
        self,
        info: TraceInfo,
        ctx: Context,
        names: Names,
        offset: int,
        progress: Progress | None,
        sort: frozenset[str] = frozenset(),
    ) -> None:
        self.info, self.ctx, self.names, self.offset = info, ctx, names, offset
        self._progress, self._sort = progress, sort
        self.nvtx_names, self.api_names = Vocabulary(), Vocabulary()
        self.ranges = Ranges(self.nvtx_names)
        self.calls: dict[bool, LaunchIndex] = {}  # by_process -> the calls keyed that way
        self._by_process: dict[str, bool] = {}
        self._gpids: set[int] = set()
        self._api_rows = 0
        self._first_api_id = 0
        # Set once a table is linked whole: the reading threads look up in what it leaves (the
        # NVTX ranges around calls, the calls that launched GPU work) only after that.
        self._linked = {NVTX: threading.Event(), RUNTIME: threading.Event()}
        self._origins: NodeOrigins | None = None  # replayed graph nodes' creations (node tracing)

    def tables(self, sources: list[Source]) -> Iterator[pa.Table]:
        db = self.ctx.db
        plans = [plan(db, s.table, s.columns(db), s.keys, s.table in self._sort) for s in sources]
        for s in sources:
            if s.table in GPU_TABLES and RUNTIME in db.tables:
                self._by_process[s.table] = _has_processes(db, s.table)
        self.calls = {by: LaunchIndex(by) for by in set(self._by_process.values())}
        if any(s.table in GPU_ROWS for s in sources):
            self._origins = node_origins(db)
        reads = Reads(db, plans, [partial(self._prepare, s, p) for s, p in zip(sources, plans, strict=True)])
        total, done = sum(p.span for p in plans), 0
        try:
            for i, (source, p) in enumerate(zip(sources, plans, strict=True)):
                self._release({s.table for s in sources[i:]})
                if source.table == RUNTIME:
                    self._first_api_id = done  # the tables before have been read whole: their rows
                for table in self._table(source, p, reads.batches(i), done, partial(reads.rows, i)):
                    done += table.num_rows
                    yield table
                    if self._progress is not None:
                        size = os.path.getsize(db.path)
                        self._progress(size * done // max(total, 1), size)
        finally:
            self._release(set())  # no reading thread waits any longer (a table that failed stops them)
            reads.close()
            for index in self.calls.values():
                index.close()

    def _prepare(self, source: Source, p: Plan, batch: pa.Table) -> _Prepared:
        """What a batch of ``source`` becomes before its links, where it is read (a reading thread):
        its key's order, its conversion (unless it needs the batches before it) and its names."""
        run = Run.of(batch, p.check) if p.check is not None else None
        if source.ordered:
            return _Prepared(run, batch=batch)
        return _Prepared(run, self._named(source.convert(batch, self.ctx), p))

    def _named(self, part: Part, p: Plan) -> _Part:
        """The part with its names and what it looks up in the tables linked before it."""
        if p.whole:
            part = _sorted(part)
        named = _Part(part, self.names.processes(part.gpid), self.names.threads(part.gtid))
        if part.table in (RUNTIME, OSRT):
            self._linked[NVTX].wait()
            named.op = self.ranges.find(part.gtid, part.start)
        elif part.table in self._by_process:
            self._linked[RUNTIME].wait()
            index = self.calls[self._by_process[part.table]]
            named.calls = index.find(index.keys(part.corr, part.gpid)) if self._api_rows else nothing(part.n)
            if self._origins is not None and "graph_node_id" in part.cols:
                self._captured(part, named.calls)
        return named

    def _captured(self, part: Part, calls: Calls) -> None:
        """Replayed rows take the NVTX range around their node's creation (:mod:`.graph_nodes`),
        where one was recorded; the others keep their launch's."""
        assert self._origins is not None
        gtid, time = self._origins.of(to_numpy(part.cols["graph_node_id"], NONE))
        rows = np.flatnonzero(gtid >= 0)
        if not len(rows):
            return
        eid, name = self.ranges.find(gtid[rows], time[rows])
        found = eid >= 0
        rows = rows[found]
        calls["op_eid"], calls["op_name"] = calls["op_eid"].copy(), calls["op_name"].copy()
        calls["op_eid"][rows], calls["op_name"][rows] = eid[found], name[found]
        if len(rows):
            part.tallies[CAPTURED] = part.tallies.get(CAPTURED, 0) + len(rows)

    def _release(self, to_come: set[str]) -> None:
        """Let the reading threads look up in the linked tables that are not ``to_come``."""
        len(self.ranges)  # its arrays joined here, not by two threads at once
        for table, linked in self._linked.items():
            if table not in to_come:
                linked.set()

    def _table(
        self, source: Source, p: Plan, batches: Iterator[_Prepared], first_id: int, counted: Callable[[], int]
    ) -> Iterator[pa.Table]:
        done = _Table()
        self.info.counters[f"rows_{p.table}"] = 0  # its place among the counters; its count once read
        order = KeyOrder(p.check) if p.check is not None else None
        for prepared in batches:
            if order is not None and prepared.run is not None and not order.follows(prepared.run):
                raise Unordered(p.table)
            named = prepared.named
            if named is None:
                assert prepared.batch is not None
                named = self._named(source.convert(prepared.batch, self.ctx), p)
            del prepared
            part = named.part
            for note, count in part.tallies.items():
                done.tallies[note] = done.tallies.get(note, 0) + count
            cols = self._links(named, first_id + done.rows, done)
            cols["process_name"], cols["thread_name"] = named.process_name, named.thread_name
            yield self._unified(part, cols, first_id + done.rows)
            done.rows += part.n
        return_freed_memory()  # a table's batches lie between live data: only a trim gives them back
        rows = counted()
        self.info.counters[f"rows_{p.table}"] = rows
        if done.rows != rows:
            raise InputError(self.ctx.db.path, f"table {p.table} changed while it was read", "convert a copy of it")
        self.info.notes.extend(note.format(count) for note, count in done.tallies.items())
        self.info.notes.extend(n for n in dict.fromkeys(done.notes) if n not in self.info.notes)
        if done.contradicted:
            self.info.notes.append(CONTRADICTED.format(done.contradicted))

    def _links(self, named: _Part, first_id: int, done: _Table) -> dict[str, Col]:
        part = named.part
        cols = dict(part.cols)
        if part.table == NVTX:
            self.ranges.add(part, first_id, self.nvtx_names.codes(part.cols["name"]))
        elif named.op is not None:
            eid, name = named.op
            cols.update(self.ranges.columns(eid, name))
            if part.table == RUNTIME:
                self._add_calls(part, eid, name)
        elif part.table in GPU_TABLES:
            cols.update(self._launches(part, named.calls, done))
        if part.table == SYNC:
            cols["sync_type"], cols["name"], contradicted = sync_types(cols["sync_type"], cols.get("launch_name"))
            done.contradicted += contradicted
        return cols

    def _add_calls(self, part: Part, op_eid: I64, op_name: I64) -> None:
        calls = {
            "pos": np.arange(self._api_rows, self._api_rows + part.n, dtype=np.int64),
            "start": part.start,
            "end": part.end,
            "gtid": part.gtid,
            "name": self.api_names.codes(part.cols["name"]),
            "op_eid": op_eid,
            "op_name": op_name,
        }
        if self._by_process and not all(self._by_process.values()):  # for the note on exports without globalPid
            self._gpids.update(pc.unique(pa.array(part.gpid)).to_pylist())
        for index in self.calls.values():
            calls["key"] = index.keys(part.corr, part.gpid, add=True)
            index.add(calls)
        self._api_rows += part.n

    def _launches(self, part: Part, calls: Calls | None, done: _Table) -> dict[str, Col]:
        if part.table not in self._by_process:  # no CUDA API table: nothing to link to
            if part.table in GPU_ROWS:
                self._count("gpu_rows_without_launch", part.n)
            return {}
        by_process = self._by_process[part.table]
        index = self.calls[by_process]
        if not by_process and len(self._gpids) > 1:
            done.notes.append(
                f"{part.table} has no globalPid: GPU rows were linked to API calls by correlation id alone"
            )
        if index.duplicates:
            done.notes.append(
                f"{index.duplicates:,} CUDA API calls repeat a correlation id of their process; "
                "GPU work was linked to the first of them"
            )
        assert calls is not None  # looked up with the part (_named)
        if part.table in GPU_ROWS:
            self._count("gpu_rows_without_launch", int((calls["pos"] < 0).sum()))
        if self._api_rows:
            cols = launch_columns(calls, part, self._first_api_id, self.offset, self.api_names)
        else:  # the table is there, without a call
            cols = {"launch_event_id": pa.array(np.zeros(part.n, np.int64), mask=np.ones(part.n, dtype=bool))}
        cols.update(self.ranges.columns(calls["op_eid"], calls["op_name"]))
        return cols

    def _count(self, key: str, n: int) -> None:
        self.info.counters[key] = self.info.counters.get(key, 0) + n

    def _unified(self, part: Part, cols: dict[str, Col], first_id: int) -> pa.Table:
        n = part.n
        ended = part.end != NO_TIME
        cols.update(identity(n, self.info))
        cols["event_id"] = pa.array(np.arange(first_id, first_id + n, dtype=np.int64))
        cols["start_ns"] = pa.array(part.start + self.offset, mask=part.start == NO_TIME)
        cols["end_ns"] = pa.array(part.end + self.offset, mask=~ended)
        cols["dur_ns"] = pa.array(part.end - part.start, mask=~ended)
        return S.conform(dict(cols), n)


def _has_processes(db: Database, table: str) -> bool:
    """Whether GPU rows of ``table`` name their process (``globalPid``; exports before 2021 do not)."""
    if "globalPid" not in db.columns(table):
        return False
    return bool(db.rows(table, f"SELECT EXISTS (SELECT 1 FROM [{table}] WHERE [globalPid] >= 0)")[0][0])


def _sorted(part: Part) -> Part:
    """Rows in start order (nsys writes them per buffer, not globally sorted)."""
    if part.n < 2 or bool((np.diff(part.start) >= 0).all()):
        return part
    return part.take(np.argsort(part.start, kind="stable"))
