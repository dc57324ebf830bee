"""Nsight Systems SQLite export (2020.3 to 2026.2) -> unified tables, one per source table.

Converted: CUDA kernels, memcpy, memset, synchronisation, whole-graph executions, CUDA event
records, CUDA runtime/driver calls, OS runtime calls, NVTX events, and the profiler's own
overhead and diagnostic messages. Every table and column is optional. GPU rows are linked to
their launching API call and everything CPU-side to the innermost NVTX push/pop range
(nsys_links). Times become Unix-epoch nanoseconds when the export has its session start.
Nothing from the profiled environment is copied unless asked for
(``include_environment=True``, see nsys_privacy).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from traceconv import schema as S
from traceconv.errors import InputError
from traceconv.readers.arrow_util import identity
from traceconv.readers.base import Progress, TraceInfo, trace_stem, unlaunched_note
from traceconv.readers.nsys.diagnostics import DIAGNOSTIC, diagnostics
from traceconv.readers.nsys.enums import Enums
from traceconv.readers.nsys.links import Launches, Ranges, launch_columns, launch_index, launch_threads
from traceconv.readers.nsys.meta import Names, check_export, export_version, gpus, session_start_ns, unconverted
from traceconv.readers.nsys.nvtx import NVTX, nvtx
from traceconv.readers.nsys.parts import NO_TIME, Col, Part, Strings
from traceconv.readers.nsys.privacy import environment
from traceconv.readers.nsys.sql import Database
from traceconv.readers.nsys.tables import (
    CUDA_EVENT,
    GRAPH,
    KERNEL,
    MEMCPY,
    MEMSET,
    OSRT,
    OVERHEAD,
    RUNTIME,
    SYNC,
    apis,
    cuda_events,
    graphs,
    kernels,
    memcpys,
    memsets,
    overheads,
    sync_types,
    syncs,
)

GPU_TABLES = (KERNEL, MEMCPY, MEMSET, SYNC, GRAPH, CUDA_EVENT)  # rows with a correlation id to a launching call
GPU_ROWS = (KERNEL, MEMCPY, MEMSET)  # the schema's GPU kinds
WORKERS = 2  # tables read at once: SQLite, Arrow and numpy release the GIL
CUDA_TABLES = (KERNEL, MEMCPY, MEMSET, RUNTIME, SYNC, GRAPH)


class NsysReader:
    """One ``.sqlite`` export. ``source_path`` names the report it came from, when it did."""

    OPTIONS: ClassVar[frozenset[str]] = frozenset({"include_environment", "source_path"})

    def __init__(
        self,
        path: Path,
        progress: Progress | None = None,
        include_environment: bool = False,
        source_path: Path | None = None,
    ) -> None:
        self.path = Path(path)
        shown = Path(source_path) if source_path is not None else self.path
        self.info = TraceInfo(path=shown, source="nsys", trace_id=trace_stem(shown))
        self._progress = progress
        self._include_environment = include_environment

    def tables(self) -> Iterator[pa.Table]:
        db = Database(self.path)
        try:
            check_export(db)
            offset = self._describe(db)
            strings = Strings(db)
            present = self._present(db, strings, Enums(db))
            yield from self._stream(db, present, Names(db, strings), offset)
            if db.replaced:
                where = ", ".join(f"{table} {count:,}" for table, count in sorted(db.replaced.items()))
                self.info.notes.append(f"texts with invalid UTF-8 kept with U+FFFD in place of the bad bytes: {where}")
        finally:
            db.close()
        unlinked = self.info.counters.get("gpu_rows_without_launch", 0)
        if unlinked:
            self.info.notes.append(unlaunched_note(unlinked, "export"))

    def _describe(self, db: Database) -> int:
        meta: dict[str, Any] = dict(export_version(db))
        if not meta:
            self.info.notes.append("the export names no Nsight Systems version (exports before 2022.2 do not)")
        meta["gpus"] = gpus(db)
        start, utc = session_start_ns(db)
        if start is not None:
            meta["session_start_ns"] = start
            meta["session_start_utc"] = utc
            self.info.time_base = "unix_epoch"
        else:
            self.info.notes.append("no TARGET_INFO_SESSION_START_TIME: times are nanoseconds from the session start")
        if self._include_environment:
            meta["environment"] = environment(db)
        self.info.metadata = meta
        return start or 0

    def _present(self, db: Database, strings: Strings, enums: Enums) -> list[tuple[str, Callable[[], Part]]]:
        """The converted tables this export has, in event-id order (NVTX and API calls first: links need them)."""
        readers: list[tuple[str, Callable[[], Part]]] = [
            (NVTX, lambda: nvtx(db, strings)),
            (RUNTIME, lambda: apis(db, strings, RUNTIME)),
            (KERNEL, lambda: kernels(db, strings)),
            (MEMCPY, lambda: memcpys(db, enums)),
            (MEMSET, lambda: memsets(db, enums)),
            (SYNC, lambda: syncs(db, enums)),
            (GRAPH, lambda: graphs(db)),
            (OSRT, lambda: apis(db, strings, OSRT)),
            (OVERHEAD, lambda: overheads(db, strings)),
            (CUDA_EVENT, lambda: cuda_events(db)),
            (DIAGNOSTIC, lambda: diagnostics(db, enums)),
        ]
        if not any(db.has(t) for t in CUDA_TABLES):
            self.info.notes.append(
                "the export has no CUDA tables (profiled without `-t cuda`?): "
                "no kernels, copies or API calls to convert"
            )
        skipped = unconverted(db, {table for table, _ in readers})
        if skipped:
            self.info.notes.append("not converted (no place in the unified schema yet): " + ", ".join(skipped))
        return [(table, read) for table, read in readers if db.has(table)]

    def _stream(
        self, db: Database, present: list[tuple[str, Callable[[], Part]]], names: Names, offset: int
    ) -> Iterator[pa.Table]:
        """Read every table in worker threads and yield each as soon as its links can be made, so
        that writing the first tables overlaps reading the next (SQLite, Arrow and Parquet release
        the GIL)."""
        counts = {table: db.count(table) for table, _ in present}
        first = dict(zip(counts, np.cumsum([0, *counts.values()])[:-1].tolist(), strict=True))
        pool = ThreadPoolExecutor(max_workers=WORKERS)
        try:
            futures = {table: pool.submit(_sorted_read, read) for table, read in present}
            nvtx_part = futures[NVTX].result() if NVTX in futures else None
            ranges = Ranges.of(nvtx_part, first.get(NVTX, 0))
            launches = Launches(futures[RUNTIME].result(), first[RUNTIME]) if RUNTIME in futures else None
            size = os.path.getsize(self.path)
            for done, (table, _) in enumerate(present, 1):
                part = futures[table].result()
                if part.n != counts[table]:
                    raise InputError(self.path, f"table {table} changed while it was read", "convert a copy of it")
                self.info.notes.extend(part.notes)
                self.info.counters[f"rows_{table}"] = part.n
                cols = self._links(part, launches, ranges, offset)
                cols["process_name"] = names.processes(part.gpid)
                cols["thread_name"] = names.threads(part.gtid)
                yield self._table(part, cols, first[table], offset)
                if self._progress is not None:
                    self._progress(size * done // len(present), size)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _links(self, part: Part, launches: Launches | None, ranges: Ranges, offset: int) -> dict[str, Col]:
        cols = self._gpu_links(part, launches, ranges, offset)
        if part.table == SYNC:
            self._sync_types(cols)
        return cols

    def _gpu_links(self, part: Part, launches: Launches | None, ranges: Ranges, offset: int) -> dict[str, Col]:
        cols = dict(part.cols)
        if part.table in (RUNTIME, OSRT):
            cols.update(ranges.enclosing(part.gtid, part.start))
        if part.table not in GPU_TABLES or launches is None:
            if part.table in GPU_ROWS:
                self._count("gpu_rows_without_launch", part.n)
            return cols
        pos, notes = launch_index(launches, part)
        self.info.notes.extend(n for n in notes if n not in self.info.notes)
        cols.update(launch_columns(launches, part, pos, offset))
        gtid, at = launch_threads(launches, pos)
        cols.update(ranges.enclosing(gtid, at))
        if part.table in GPU_ROWS:
            self._count("gpu_rows_without_launch", int((pos < 0).sum()))
        return cols

    def _sync_types(self, cols: dict[str, Col]) -> None:
        cols["sync_type"], cols["name"], contradicted = sync_types(cols["sync_type"], cols.get("launch_name"))
        if contradicted:
            self.info.notes.append(
                f"{contradicted:,} synchronisation rows have a syncType code that contradicts "
                "their call (e.g. cudaStreamSynchronize coded as stream wait event): sync_type "
                "follows the call; the code is in args"
            )

    def _count(self, key: str, n: int) -> None:
        self.info.counters[key] = self.info.counters.get(key, 0) + n

    def _table(self, part: Part, cols: dict[str, Col], first_id: int, offset: int) -> pa.Table:
        n = part.n
        ended = part.end != NO_TIME
        cols.update(identity(n, self.info))
        cols["event_id"] = pa.array(np.arange(first_id, first_id + n, dtype=np.int64))
        cols["start_ns"] = pa.array(part.start + offset, mask=part.start == NO_TIME)
        cols["end_ns"] = pa.array(part.end + offset, mask=~ended)
        cols["dur_ns"] = pa.array(part.end - part.start, mask=~ended)
        return S.conform(dict(cols), n)


def _sorted_read(read: Callable[[], Part]) -> Part:
    return _sorted(read())


def _sorted(part: Part) -> Part:
    """Rows in start order (nsys writes them per buffer, not globally sorted)."""
    if part.n < 2 or bool((np.diff(part.start) >= 0).all()):
        return part
    return part.take(np.argsort(part.start, kind="stable"))
