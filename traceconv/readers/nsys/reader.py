"""Nsight Systems SQLite export (2020.3 to 2026.2) -> unified tables, a batch of rows at a time.

Converted: CUDA kernels, memcpy, memset, synchronisation, whole-graph executions, CUDA event
records, CUDA runtime/driver calls, OS runtime calls, NVTX events, and the profiler's own
overhead and diagnostic messages. Every table and column is optional. GPU rows are linked to
their launching API call and everything CPU-side to the innermost NVTX push/pop range
(nsys_links). Times become Unix-epoch nanoseconds when the export has its session start.
Nothing from the profiled environment is copied unless asked for
(``include_environment=True``, see nsys_privacy). Tables are read in bounded batches
(:mod:`.batches`) and converted as they come (:mod:`.stream`).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa

from traceconv.process import paused_gc
from traceconv.readers.base import Progress, Rewind, TraceInfo, trace_stem, unlaunched_note
from traceconv.readers.nsys.batches import Unordered
from traceconv.readers.nsys.enums import Enums
from traceconv.readers.nsys.meta import (
    Names,
    check_export,
    cuda_devices,
    devices,
    export_version,
    gpus,
    session_start_ns,
    unconverted,
)
from traceconv.readers.nsys.nvtx import Domains
from traceconv.readers.nsys.parts import Strings
from traceconv.readers.nsys.privacy import environment
from traceconv.readers.nsys.samples import MetricNames, Totals
from traceconv.readers.nsys.sources import SOURCES, Context, Source
from traceconv.readers.nsys.sql import Database
from traceconv.readers.nsys.stream import Stream
from traceconv.readers.nsys.tables import GRAPH, KERNEL, MEMCPY, MEMSET, RUNTIME, SYNC

# Columns whose values repeat row after row in an export's output (the args of kernels: a few
# launch configurations), written with dictionary pages (writing.new_writer).
REPEATED_COLUMNS = ("args",)

CUDA_TABLES = (KERNEL, MEMCPY, MEMSET, RUNTIME, SYNC, GRAPH)


class NsysReader:
    """One ``.sqlite`` export. ``source_path`` names the report it came from, when it did.

    ``sort``: the tables found out of order by earlier reads of this export (read through
    SQLite's sort); a table found so raises :class:`~traceconv.readers.base.Rewind` and joins it
    (a report's reader shares its set with the reader of its export).
    """

    OPTIONS: ClassVar[frozenset[str]] = frozenset({"include_environment", "source_path"})
    REPEATED: ClassVar[tuple[str, ...]] = REPEATED_COLUMNS
    # Each table is one table's batch of the export: most of the schema's columns are null in all
    # its rows or hold one value (the kind, the process), and most batches have one of a few sizes
    # (writing.write_tables reuses those columns' chunks).
    SPARSE_GROUPS: ClassVar[bool] = True

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
        self.sort: set[str] = set()

    def tables(self) -> Iterator[pa.Table]:
        before = copy.deepcopy(self.info)
        db = Database(self.path)
        try:
            check_export(db)
            offset = self._describe(db)
            strings = Strings(db)
            present = self._present(db)
            ctx = Context(db, strings, Enums(db), Domains(db, strings), MetricNames(db), Totals(), devices(db))
            stream = Stream(self.info, ctx, Names(db, strings), offset, self._progress, frozenset(self.sort))
            with paused_gc():  # batches of arrays, not of Python objects: collecting finds no cycles
                yield from stream.tables(present)
            if self.sort:
                self.info.notes.append(
                    "not stored in time order, so read again through SQLite's sort (a second pass): "
                    + ", ".join(sorted(self.sort))
                )
            if db.replaced:
                where = ", ".join(f"{table} {count:,}" for table, count in sorted(db.replaced.items()))
                self.info.notes.append(f"texts with invalid UTF-8 kept with U+FFFD in place of the bad bytes: {where}")
        except Unordered as exc:
            self.sort.add(exc.table)
            self.info = before
            raise Rewind(f"{exc.table} is not stored in time order: read again through SQLite's sort") from None
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
        if mapping := cuda_devices(db):
            meta["cuda_devices"] = mapping
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

    def _present(self, db: Database) -> list[Source]:
        """The converted tables this export has, in event-id order (NVTX and API calls first: links need them)."""
        if not any(db.has(t) for t in CUDA_TABLES):
            self.info.notes.append(
                "the export has no CUDA tables (profiled without `-t cuda`?): "
                "no kernels, copies or API calls to convert"
            )
        skipped = unconverted(db, {s.table for s in SOURCES})
        if skipped:
            self.info.notes.append("not converted (no place in the unified schema yet): " + ", ".join(skipped))
        return [s for s in SOURCES if db.has(s.table)]
