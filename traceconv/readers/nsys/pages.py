"""Integer columns read straight from an export's SQLite pages, in numpy, a batch of pages at a time.

An export's event tables are integers, millions of rows of them; the SQL drivers hand each
value over one call at a time (ADBC's SQLite driver: ~50 ns a value, most of a conversion's
time). SQLite's file format is documented and stable (https://sqlite.org/fileformat2.html):
a table is a B-tree of pages, its rows, in rowid order, in the cells of its leaf pages, each
row a record (a header of serial types, then the values, big-endian). This module finds a
table's leaf pages once (its interior pages), and decodes the rows of a run of leaves with a
few numpy operations per column over every row at once.

It reads only what it can read exactly: a rollback-journal file (not WAL), table leaf pages,
rows whose record holds every column of the table with single-byte serial types (no text or
blob longer than a few bytes, nor real values, in the columns it is asked for), payloads
that fit their page (no overflow pages). Anything else in a batch makes :meth:`Pages.rows`
return None, and the caller reads that batch through SQL as before.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from traceconv.readers.arrow_util import I64

MAGIC = b"SQLite format 3\x00"
FILE_HEADER = 100  # page 1 starts with the file's header
LEAF, INTERIOR = 13, 5  # table B-tree page types
LEAF_HEADER, INTERIOR_HEADER = 8, 12
ROLLBACK = 1  # file format read/write version (2: WAL, whose pages may be newer than the file's)
# Serial types 0-127 (a record header of single-byte types holds no others): the bytes a value
# takes (0: NULL, 1-6: integers of 1, 2, 3, 4, 6, 8 bytes, 7: a real, 8 and 9: the integers 0 and
# 1, 10 and 11: reserved, 12 and up: blobs (even) and texts (odd) of (type - 12) // 2 bytes).
SERIAL = np.arange(128)
WIDTHS = np.where(SERIAL >= 12, (SERIAL - 12) // 2, np.array([0, 1, 2, 3, 4, 6, 8, 8, 0, 0, 0, 0] + [0] * 116))
INTEGER = (SERIAL <= 9) & (SERIAL != 7)  # the types of an integer value, or NULL
# Right shift of the 8 bytes read at a value that leaves its own bytes, sign-extended (63: none).
SHIFTS = np.where(INTEGER & (WIDTHS > 0), 64 - 8 * WIDTHS, 63)


class NotReadable(Exception):
    """This file or table is not read from its pages (its reads go through SQL)."""


@dataclass(frozen=True)
class Leaves:
    """A table's leaf pages in rowid order, and for each the largest rowid it may hold (its
    parent's key; the last one: none, as large as an int64)."""

    pages: I64
    upper: I64


class Pages:
    """The pages of one SQLite file (opened once, read with ``pread``: safe from several threads)."""

    def __init__(self, path: str) -> None:
        if not hasattr(os, "pread"):
            raise NotReadable("no pread on this platform")  # Windows
        self._fd = os.open(path, os.O_RDONLY)
        try:
            header = os.pread(self._fd, FILE_HEADER, 0)
            if len(header) < FILE_HEADER or header[:16] != MAGIC:
                raise NotReadable("not an SQLite 3 file")
            size = int.from_bytes(header[16:18], "big")
            self.page_size = 65536 if size == 1 else size
            if header[18] != ROLLBACK or header[19] != ROLLBACK:
                raise NotReadable("a WAL file: its latest pages may be in the WAL")
            self.usable = self.page_size - header[20]
        except BaseException:
            os.close(self._fd)
            raise
        self.max_local = self.usable - 35  # a table leaf's largest payload kept in its page

    def close(self) -> None:
        os.close(self._fd)

    def _read(self, pages: I64) -> np.ndarray:
        """The pages (numbers from 1), one after another, with 8 spare bytes at the end."""
        ps = self.page_size
        out = np.empty(len(pages) * ps + 8, dtype=np.uint8)
        out[-8:] = 0  # room to read 8 bytes at any value
        if not len(pages):
            return out
        # runs of consecutive pages, each read with one pread
        breaks = np.flatnonzero(np.diff(pages) != 1) + 1
        starts = np.concatenate(([0], breaks)).tolist()
        ends = np.concatenate((breaks, [len(pages)])).tolist()
        view = out.data
        for a, b in zip(starts, ends, strict=True):
            _read_into(self._fd, view[a * ps : b * ps], (int(pages[a]) - 1) * ps)
        return out

    def leaves(self, root: int) -> Leaves:
        """The leaf pages under ``root``, level by level (each level's pages in key order)."""
        level = np.array([root], dtype=np.int64)
        upper = np.array([np.iinfo(np.int64).max], dtype=np.int64)
        ps = self.page_size
        while True:
            # Every leaf of a B-tree is at the same depth: the level's first page says which it is.
            first_page = self._read(level[:1])
            if first_page[FILE_HEADER if int(level[0]) == 1 else 0] == LEAF:
                return Leaves(level, upper)
            buf = self._read(level)
            base = np.arange(len(level), dtype=np.int64) * ps + np.where(level == 1, FILE_HEADER, 0)
            if not bool((buf[base] == INTERIOR).all()):
                raise NotReadable("a page of the table is neither a leaf nor an interior page")
            ncells = _be(buf, base + 3, 2)
            right = _be(buf, base + 8, 4)
            # children in order: each cell's left child (keys up to the cell's key), then the right-most
            first = np.cumsum(ncells) - ncells
            total = int(ncells.sum())
            owner, cell = _cells(buf, base - np.where(level == 1, FILE_HEADER, 0), base + INTERIOR_HEADER, ncells)
            child = _be(buf, cell, 4)
            key, _ = _varints(buf, cell + 4)
            # the next level: page p's cells' children in order, then its right-most child
            pos = np.arange(total) + owner
            nxt = np.empty(total + len(level), dtype=np.int64)
            bound = np.empty(total + len(level), dtype=np.int64)
            nxt[pos] = child
            bound[pos] = key
            last = first + ncells + np.arange(len(level))
            nxt[last] = right
            bound[last] = upper
            level, upper = nxt, bound

    def rows(
        self, leaves: Leaves, lo: int, hi: int, columns: int, wanted: list[int], alias: int | None
    ) -> pa.Table | None:
        """Rows ``lo <= rowid < hi`` of a table of ``columns`` columns: the columns at ``wanted`` (in
        that order; ``alias``: the one that is the rowid, stored as NULL) as int64, nulls kept.
        None where a row is not one this module reads exactly (see the module's docstring)."""
        first = int(np.searchsorted(leaves.upper, lo, "left"))
        last = int(np.searchsorted(leaves.upper, hi - 1, "left"))
        pages = leaves.pages[first : last + 1]
        ps = self.page_size
        buf = self._read(pages)
        start = np.arange(len(pages), dtype=np.int64) * ps
        base = start + np.where(pages == 1, FILE_HEADER, 0)
        if len(pages) and not bool((buf[base] == LEAF).all()):
            return None
        _, cell = _cells(buf, start, base + LEAF_HEADER, _be(buf, base + 3, 2))
        payload, n1 = _varints(buf, cell)
        rowid, n2 = _varints(buf, cell + n1)
        keep = (rowid >= lo) & (rowid < hi)
        if not bool(keep.all()):
            cell, payload, rowid, n1, n2 = cell[keep], payload[keep], rowid[keep], n1[keep], n2[keep]
        if len(rowid) > 1 and not bool((rowid[1:] > rowid[:-1]).all()):
            return None  # not in rowid order: not a table B-tree as this module reads it
        record = cell + n1 + n2
        head = buf[record]
        # every row: all columns, each serial type a single byte, the payload within its page
        if not bool(((head == columns + 1) & (payload <= self.max_local)).all()):
            return None
        windows = np.lib.stride_tricks.as_strided(buf.view(">i8"), shape=(len(buf) - 7,), strides=(1,))
        at = record + (columns + 1)  # where the next value starts
        found: dict[int, pa.Array] = {}
        wanted_set = set(wanted)
        for k in range(columns):
            st = buf[record + (1 + k)]
            lo, hi = (int(st.min()), int(st.max())) if len(st) else (0, 0)
            if k in wanted_set:
                got = _integers(windows, at, st, (lo, hi), rowid if k == alias else None)
                if got is None:
                    return None
                found[k] = got
            if lo == hi:  # one serial type: one width (most columns of a batch)
                at += WIDTHS[lo]
            else:
                at += WIDTHS[st]
        if not bool((at - record == payload).all()):
            return None  # a record is exactly its payload
        return pa.table([found[k] for k in wanted], names=[str(k) for k in wanted])


def _integers(
    windows: np.ndarray, at: I64, st: np.ndarray, extent: tuple[int, int], rowid: I64 | None
) -> pa.Array | None:
    """One column's values (serial types ``st``, from ``extent[0]`` to ``extent[1]``, starting at
    ``at``) as int64; the rowid where the column is its alias (stored as NULL); None where a value
    is not an integer (a real, text, blob)."""
    lo, hi = extent
    if rowid is not None:
        return pa.array(rowid) if hi == 0 else None
    if hi > 9 or (lo <= 7 <= hi and bool((st == 7).any())):
        return None
    if lo >= 8:  # only the constants 0 and 1, which take no bytes
        return pa.array(st.astype(np.int64) - 8)
    if lo == hi != 0:  # one width, every value present
        return pa.array(windows[at].astype(np.int64) >> int(SHIFTS[lo]))
    values = windows[at].astype(np.int64) >> SHIFTS[st]
    if hi >= 8:
        values = np.where(st >= 8, st.astype(np.int64) - 8, values)
    return pa.array(values, mask=st == 0) if lo == 0 else pa.array(values)


def _read_into(fd: int, view: memoryview, offset: int) -> None:
    """Fill ``view`` with the file's bytes from ``offset`` (``pread``: no shared file position)."""
    while len(view):
        if hasattr(os, "preadv"):
            got = os.preadv(fd, [view], offset)
        else:  # no preadv (Windows, older macOS): a copy
            data = os.pread(fd, len(view), offset)
            view[: len(data)] = data
            got = len(data)
        if got <= 0:
            raise NotReadable("the file is shorter than its pages")
        view, offset = view[got:], offset + got


def _cells(buf: np.ndarray, start: I64, pointers: I64, ncells: I64) -> tuple[I64, I64]:
    """Every cell of the pages, page by page in pointer order: (its page's index, where it is in
    ``buf``). ``start``: where each page begins; ``pointers``: where its cell pointers begin (2
    bytes each, offsets from the page's start)."""
    owner = np.repeat(np.arange(len(ncells)), ncells)
    slot = np.arange(int(ncells.sum()), dtype=np.int64) - (np.cumsum(ncells) - ncells)[owner]
    return owner, start[owner] + _be(buf, pointers[owner] + 2 * slot, 2)


def _be(buf: np.ndarray, at: I64, width: int) -> I64:
    """Unsigned big-endian integers of ``width`` bytes at ``at``."""
    out = np.zeros(len(at), dtype=np.int64)
    for i in range(width):
        out = (out << 8) | buf[at + i]
    return out


def _varints(buf: np.ndarray, at: I64) -> tuple[I64, I64]:
    """SQLite varints at ``at``: (values, lengths in bytes). Up to 8 bytes of 7 bits, a ninth of 8.

    Every varint is read a byte at a time in step, over whole arrays (no gathering of those still
    going on: a table's varints are of one or two lengths, so few steps are taken)."""
    b = buf[at]
    value = (b & 0x7F).astype(np.int64)
    length = np.ones(len(at), dtype=np.int64)
    more = b >= 0x80
    for i in range(1, 9):
        if not bool(more.any()):
            break
        b = buf[at + i]
        if i == 8:  # the ninth byte: all 8 bits
            value = np.where(more, (value << 8) | b, value)
        else:
            value = np.where(more, (value << 7) | (b & 0x7F), value)
        length += more
        more &= b >= 0x80
    return value, length
