"""Where pass-1 tables wait for pass 2: in memory while small, then in temporary Arrow IPC files.

Each table is kept with the columns it has (pass 1 builds only those that hold a value:
:func:`traceconv.schema.present`; most of the 62 are null in most rows), and written as an IPC
stream of its own, so that tables of different columns can follow each other in one file
and be read back one at a time. Worker processes write segments to files of their own and
the main process reads them back in chunk order (:meth:`Spill.add_segment`).
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import sys
import tempfile
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from traceconv.errors import TraceconvError

SPILL_BYTES = 1 << 20


def temporary_path() -> str:
    """A new empty temporary file's path: open it with :data:`APPEND`, never to truncate.

    On ext4, truncating a file of size 0 (``"wb"``) marks it for "replace via truncate": its
    dirty pages are flushed to disk when it is closed (a worker's spill, at the end of pass 1, on
    the critical path) and removing it waits for that writeback.
    """
    fd, path = tempfile.mkstemp(prefix="traceconv-", suffix=".arrows")
    os.close(fd)
    return path


APPEND = "ab"  # for files from temporary_path(): already empty, so no O_TRUNC (see above)


class SegmentFile:
    """A temporary file of IPC streams, one per table, appended and read back by position.

    ``path``, if given, is an empty file from :func:`temporary_path` (it is appended to).
    """

    def __init__(self, path: str | None = None) -> None:
        self.path = path or temporary_path()
        self._sink: Any = None
        self._source: Any = None

    def write(self, table: pa.Table) -> tuple[int, int]:
        if self._sink is None:
            self._sink = pa.OSFile(self.path, APPEND)
        pos = self._sink.tell()
        with pa.ipc.new_stream(self._sink, table.schema) as writer:  # closes the stream, not the file
            writer.write_table(table)
        return pos, self._sink.tell() - pos

    def read(self, pos: int, length: int) -> pa.Table:
        """The table at ``pos``, mapped from the file rather than copied into the heap: its
        pages go back when the table is freed (a copy, a few MiB for each table in flight,
        left the heap fragmented, and the process larger, as pass 2 went on)."""
        if self._source is None:
            self._source = open(self.path, "rb")  # noqa: SIM115 - closed by remove()
        if pos + length > os.fstat(self._source.fileno()).st_size:  # mapped past its end: SIGBUS, not an error
            raise TraceconvError(
                self.path,
                "(a temporary file of this conversion) was cut short while in use",
                "keep cleaners off the temporary folder during a conversion, or set TMPDIR to another place",
            )
        start = pos - pos % mmap.ALLOCATIONGRANULARITY
        view = mmap.mmap(self._source.fileno(), pos + length - start, access=mmap.ACCESS_READ, offset=start)
        return pa.ipc.open_stream(pa.py_buffer(view)[pos - start :]).read_all()

    def release(self, pos: int, length: int) -> None:
        """The table at ``pos`` will not be read again: its blocks (and cached pages) go now, in the
        process that read it, rather than all of the file's at once when it is removed, which the
        main process would wait for as the conversion ends. Best effort: where the system or the
        file system cannot, they go with the file."""
        with contextlib.suppress(OSError):
            fd = os.open(self.path, os.O_WRONLY)
            try:
                punch_hole(fd, pos, length)
            finally:
                os.close(fd)

    def close_writer(self) -> None:
        if self._sink is not None:
            self._sink.close()
            self._sink = None

    def remove(self) -> None:
        self.close_writer()
        if self._source is not None:
            self._source.close()
            self._source = None
        # Windows refuses while a table read from the file is still mapped (after an error);
        # the file is then left in the temporary folder. Elsewhere the mapping keeps its pages.
        with contextlib.suppress(FileNotFoundError, PermissionError):
            os.unlink(self.path)


FALLOC_PUNCH_HOLE = 0x02 | 0x01  # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE (Linux)
_fallocate: Any = None


def punch_hole(fd: int, start: int, length: int) -> None:
    """Free the blocks of ``fd`` (open for writing) that lie wholly inside ``[start, start + length)``;
    the blocks at its ends, shared with the data around it, stay. Nothing where Linux's fallocate
    is missing; an error of the file system (EOPNOTSUPP ...) leaves the blocks as they were."""
    global _fallocate
    if _fallocate is None:
        _fallocate = False
        if sys.platform == "linux":
            with contextlib.suppress(OSError, AttributeError):  # no C library to load, no fallocate in it
                _fallocate = ctypes.CDLL(None).fallocate
                _fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    if not _fallocate:
        return
    block = os.fstat(fd).st_blksize or 4096
    first = -(-start // block) * block
    end = (start + length) // block * block
    if end > first:
        _fallocate(fd, FALLOC_PUNCH_HOLE, first, end - first)  # its return value: -1 where it could not


def min_start(table: pa.Table) -> int | None:
    if "start_ns" not in table.column_names:
        return None
    value = pc.min(table["start_ns"]).as_py()
    return int(value) if value is not None else None


class Spill:
    """Pass-1 tables in order; iterating hands them back (and forgets them) one by one."""

    def __init__(self, memory: int = SPILL_BYTES) -> None:
        self._entries: list[tuple[Any, ...]] = []
        self._rows: list[int] = []  # each entry's
        self._bytes = 0
        self._memory = memory
        self._file: SegmentFile | None = None
        self._files: list[SegmentFile] = []
        self.min_start: int | None = None

    def _start(self, start: int | None) -> None:
        if start is not None:
            self.min_start = start if self.min_start is None else min(self.min_start, start)

    def append(self, table: pa.Table) -> None:
        self._start(min_start(table))
        if self._file is None and self._bytes + table.nbytes <= self._memory:
            self._entries.append((table,))
            self._rows.append(table.num_rows)
            self._bytes += table.nbytes
            return
        if self._file is None:
            self._file = SegmentFile()
            self._files.append(self._file)
        self._entries.append((self._file, *self._file.write(table), 0))
        self._rows.append(table.num_rows)

    def adopt(self, file: SegmentFile) -> SegmentFile:
        """A file another process writes segments to; removed with this spill."""
        self._files.append(file)
        return file

    def add_segment(
        self, file: SegmentFile, pos: int, length: int, event_offset: int, start: int | None, rows: int
    ) -> None:
        """A table a worker wrote to (an adopted) ``file``; its event ids get ``event_offset`` added when read."""
        self._start(start)
        self._entries.append((file, pos, length, event_offset))
        self._rows.append(rows)

    def __iter__(self) -> Iterator[pa.Table]:
        for file in self._files:
            file.close_writer()
        self._entries.reverse()
        self._rows = []
        while self._entries:
            yield _table(self._entries.pop())

    def groups(self, rows: int) -> list[range]:
        """The entries of each row group, as :func:`row_groups` gathers them (for :meth:`tables`)."""
        for file in self._files:
            file.close_writer()
        out, first, have = [], 0, 0
        for i, n in enumerate(self._rows):
            have += n
            if have >= rows:
                out.append(range(first, i + 1))
                first, have = i + 1, 0
        if first < len(self._rows):
            out.append(range(first, len(self._rows)))
        return out

    def tables(self, entries: range) -> list[pa.Table]:
        """The tables of ``entries`` (kept: also readable by processes forked after pass 1)."""
        return [_table(self._entries[i]) for i in entries]

    def release(self, entries: range) -> None:
        """The tables of ``entries`` were read for the last time, and no table made from them is
        left (its pages are mapped): their bytes in the files go."""
        for i in entries:
            entry = self._entries[i]
            if len(entry) > 1:
                file, pos, length, _ = entry
                file.release(pos, length)

    def close(self) -> None:
        self._entries, self._rows = [], []
        for file in self._files:
            file.remove()
        self._files = []


def _table(entry: tuple[Any, ...]) -> pa.Table:
    if len(entry) == 1:
        table: pa.Table = entry[0]
        return table
    file, pos, length, offset = entry
    table = file.read(pos, length)
    if offset:
        at = table.schema.get_field_index("event_id")
        table = table.set_column(at, "event_id", pc.add(table["event_id"], offset))
    return table


def row_groups(tables: Iterable[pa.Table], rows: int) -> Iterator[list[pa.Table]]:
    """Consecutive tables, gathered until they hold at least ``rows`` rows (the last group may hold fewer)."""
    group: list[pa.Table] = []
    have = 0
    for table in tables:
        group.append(table)
        have += table.num_rows
        if have >= rows:
            yield group
            group, have = [], 0
    if group:
        yield group
