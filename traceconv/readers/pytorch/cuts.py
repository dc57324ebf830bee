"""Where events end in a Chrome trace's text: the byte patterns between events, the bracket scan
that finds the end of the events array, and cuts looked for by position in a plain file
(:class:`Positioned`: pass 1's main process reads only a few bytes where each cut lies)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import IO

from traceconv.errors import InputError
from traceconv.readers.pytorch.prefetch import BLOCK

CUT = re.compile(rb"\}\s*,\s*\{")  # between two events
EVENT_END = re.compile(rb"\}\s*,")  # after an event (the next may be damaged)
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


def skip_ws(buf: bytes | bytearray, i: int) -> int:
    n = len(buf)
    while i < n and buf[i] in b" \t\r\n":
        i += 1
    return i


def prefix(buf: bytearray | bytes, end: int) -> bytes:
    """``bytes(buf[:end])`` with one copy instead of two (a slice of a bytearray is a copy)."""
    with memoryview(buf) as view:
        return bytes(view[:end])


class Positioned:
    """The blocks :class:`Prefetch` would read, without reading them: ``read`` reads a block (the
    header's few), ``skip`` only moves on, ``at`` reads the bytes at a position."""

    def __init__(self, fh: IO[bytes]) -> None:
        self._fh = fh
        self._fd = fh.fileno()
        self._size = os.fstat(self._fd).st_size
        self._position = 0

    def read(self) -> tuple[bytes, int | None]:
        data = self.at(self._position, min(BLOCK, self._size - self._position))
        self._position += len(data)
        return data, None

    def skip(self) -> int:
        """Move one block on, as :meth:`read` would; the bytes it would have returned (0: the end)."""
        step = min(BLOCK, self._size - self._position)
        self._position += step
        return step

    def at(self, offset: int, length: int) -> bytes:
        data = os.pread(self._fd, length, offset)
        if len(data) != length:  # the file changed while it was read: the reading path decides
            raise InputError(Path(self._fh.name), "changed while it was read", "convert it once it is complete")
        return data

    def tell(self) -> int:
        return self._position

    def close(self) -> None:
        pass


class Span:
    """Where a chunk lies in a :class:`Positioned` file; ``bytes(span)`` reads it."""

    def __init__(self, fh: Positioned, offset: int, length: int) -> None:
        self._fh, self.offset, self._length = fh, offset, length

    def __len__(self) -> int:
        return self._length

    def __bytes__(self) -> bytes:
        return self._fh.at(self.offset, self._length)


WINDOW = 4096  # bytes first read where a cut is looked for (events are a few hundred bytes)


def first_match(fh: Positioned, lo: int, hi: int) -> tuple[int, int] | None:
    """The first :data:`CUT` starting at or after ``lo`` in ``[lo, hi)``: the absolute offsets
    just past its ``}`` and of its ``{`` (None: none). Windows grow until one holds a whole
    match: the first match found in a window is the first in the range (an earlier one cut
    off by the window's end would leave no room for another ``}`` after it)."""
    size = WINDOW
    while lo < hi:
        window = fh.at(lo, min(size, hi - lo))
        m = CUT.search(window)
        if m is not None:
            return lo + m.start() + 1, lo + m.end() - 1
        if lo + len(window) >= hi:
            return None
        size *= 4
    return None


def array_end(buf: bytes) -> int | None:
    """Offset of the ``]`` closing the events array that ``buf`` starts inside, or None.

    Strings are skipped by the regex at C speed; only brackets reach Python.
    """
    depth = 0
    for m in _TOKEN.finditer(buf):
        c = buf[m.start()]
        if c in b"{[":
            depth += 1
        elif c in b"}]":
            depth -= 1
            if depth < 0:
                return m.start() if c == ord("]") else None
    return None
