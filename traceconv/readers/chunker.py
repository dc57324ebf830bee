"""Split a Chrome trace JSON document into bounded chunks of whole events, without a full parse.

The document is ``{... "traceEvents": [ev, ev, ...] ...}`` (or a bare ``[ev, ...]``).
Kineto writes it as text, so we find event boundaries with a byte pattern (``}`` ``,``
``{`` at the top level of the array) and let the decoder confirm each cut: a cut inside a
nested value or a string leaves unbalanced JSON, which the decoder rejects at the very
end of the chunk, and we move the cut to the next candidate. Any other decode error is a
real defect of the input and is reported with its absolute byte offset.
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, NoReturn

import orjson

from traceconv.errors import InputError, UnsupportedFormatError

BLOCK = 4 << 20  # bytes read per I/O call
CHUNK = 4 << 20  # target bytes of events decoded at once
MAX_HEADER = 64 << 20  # bytes of top-level keys allowed before "traceEvents"
MAX_EVENT = 512 << 20  # a single event larger than this is hostile, not a trace

_CUT = re.compile(rb"\}\s*,\s*\{")
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')


class ChunkDecodeError(Exception):
    """Raised by a chunk decoder; ``pos`` is the byte offset of the error within the chunk."""

    def __init__(self, pos: int | None, message: str) -> None:
        self.pos = pos
        super().__init__(message)


@dataclass
class Document:
    """What surrounds the events: top-level keys before and after ``traceEvents``."""

    top: dict[str, Any] = field(default_factory=dict)
    bytes_total: int | None = None  # compressed size on disk, for progress


def open_binary(path: Path) -> IO[bytes]:
    """Open a trace, transparently decompressing gzip by magic number (not by extension)."""
    fh = open(path, "rb")
    magic = fh.read(2)
    fh.seek(0)
    if magic == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=fh, mode="rb")  # type: ignore[return-value]
    return fh


def _read(fh: IO[bytes], path: Path, offset: int) -> bytes:
    try:
        return fh.read(BLOCK)
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(
            path, f"compressed data is damaged near byte {offset:,} ({exc})", "re-copy the file or use --salvage"
        ) from exc


def _skip_ws(buf: bytes, i: int) -> int:
    n = len(buf)
    while i < n and buf[i] in b" \t\r\n":
        i += 1
    return i


class EventChunks:
    """Iterate over decoded chunks of events.

    ``decode(chunk_bytes) -> list`` must decode ``b"[" + chunk + b"]"`` and raise
    :class:`ChunkDecodeError` on failure. ``progress(n)`` is called with raw bytes consumed.
    """

    def __init__(
        self,
        path: Path,
        decode: Callable[[bytes], list[Any]],
        progress: Callable[[int], None] | None = None,
        chunk_size: int = CHUNK,
    ) -> None:
        self.path = path
        self.decode = decode
        self.progress = progress
        self.chunk_size = chunk_size
        self.document = Document()
        self._offset = 0  # absolute offset (decompressed) of buf[0]

    def __iter__(self) -> Iterator[list[Any]]:
        with open_binary(self.path) as fh:
            raw = getattr(fh, "fileobj", fh)
            buf, eof = self._header(fh)
            yield from self._events(fh, raw, buf, eof)

    # -- header -------------------------------------------------------------------
    def _header(self, fh: IO[bytes]) -> tuple[bytes, bool]:
        buf = b""
        eof = False
        while True:
            start = _skip_ws(buf, 0)
            if start < len(buf) and buf[start:start + 1] == b"[":
                self._offset = start + 1
                return buf[start + 1:], eof
            if start < len(buf) and buf[start:start + 1] != b"{":
                raise UnsupportedFormatError(
                    self.path, f"not a JSON trace (starts with {buf[start:start + 10]!r})",
                    "give a PyTorch profiler trace (.json or .json.gz) or an Nsight Systems file",
                )
            m = _EVENTS_KEY.search(buf)
            if m:
                head = buf[:m.start()].rstrip().rstrip(b",")
                self.document.top.update(self._parse_object(head + b"}", 0))
                self._offset = m.end()
                return buf[m.end():], eof
            if eof or len(buf) > MAX_HEADER:
                raise UnsupportedFormatError(
                    self.path, 'no "traceEvents" array found' + (" in the first 64 MiB" if not eof else ""),
                    "is this a PyTorch profiler / Chrome trace?",
                )
            more = _read(fh, self.path, len(buf))
            eof = not more
            buf += more

    def _parse_object(self, text: bytes, at: int) -> dict[str, Any]:
        try:
            obj = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise InputError(self.path, f"invalid JSON in the top-level keys near byte {at + exc.pos:,}: {exc.msg}",
                             "check that the file is a complete trace") from exc
        if not isinstance(obj, dict):
            raise UnsupportedFormatError(self.path, "top level is not a JSON object", "give a trace file")
        return obj

    # -- events -------------------------------------------------------------------
    def _events(self, fh: IO[bytes], raw: Any, buf: bytes, eof: bool) -> Iterator[list[Any]]:
        pos = _skip_ws(buf, 0)
        buf, self._offset = buf[pos:], self._offset + pos
        want = 2 * self.chunk_size
        while True:
            if self.progress is not None and hasattr(raw, "tell"):
                self.progress(raw.tell())
            if not eof and len(buf) < want:
                more = _read(fh, self.path, self._offset + len(buf))
                eof = not more
                buf += more
                continue
            try:
                cut = self._cut(buf, eof)
            except _NeedMore:
                if len(buf) > MAX_EVENT:
                    raise InputError(self.path, f"an event at byte {self._offset:,} is larger than "
                                     f"{MAX_EVENT >> 20} MiB", "this is not a profiler trace as written by PyTorch") from None
                want = len(buf) + 2 * self.chunk_size
                continue
            want = 2 * self.chunk_size
            if cut is None:  # only the end of the array (and the document) is left
                yield from self._finish(buf)
                return
            chunk_end, next_start, events = cut
            yield events
            self._offset += next_start
            buf = buf[next_start:]

    def _cut(self, buf: bytes, eof: bool) -> tuple[int, int, list[Any]] | None:
        """Decode the longest prefix ending at a confirmed cut beyond the target size."""
        if eof:
            return self._last_cut(buf)
        search_from = min(self.chunk_size, max(len(buf) - 1, 0))
        for m in _CUT.finditer(buf, search_from):
            end = m.start() + 1
            try:
                return end, m.end() - 1, self.decode(buf[:end])
            except ChunkDecodeError as exc:
                if exc.pos is not None and exc.pos < end + 1:
                    self._fail(exc, buf)
        if eof:
            return None
        # No confirmed cut in a full buffer: one event is larger than the buffer. Read on.
        raise _NeedMore()

    def _last_cut(self, buf: bytes) -> tuple[int, int, list[Any]] | None:
        """At the end of input: everything up to the last event boundary, leaving one event and the tail.

        A failure here may be a candidate inside the keys after the array; the exact
        bracket scan of :meth:`_finish` then decides.
        """
        last = None
        for last in _CUT.finditer(buf):
            pass
        if last is None:
            return None
        end = last.start() + 1
        try:
            return end, last.end() - 1, self.decode(buf[:end])
        except ChunkDecodeError:
            return None

    def _finish(self, buf: bytes) -> Iterator[list[Any]]:
        end = _array_end(buf)
        if end is None:
            raise InputError(
                self.path,
                f"truncated: the traceEvents array is never closed (data ends at byte {self._offset + len(buf):,})",
                "the run was probably killed while writing; use --salvage to keep the complete events",
            )
        body = buf[:end].rstrip()
        if body:
            try:
                yield self.decode(body)
            except ChunkDecodeError as exc:
                self._fail(exc, buf)
        self._tail(buf[end + 1:])

    def _tail(self, rest: bytes) -> None:
        rest = rest.strip()
        if rest.startswith(b","):
            self.document.top.update(self._parse_object(b"{" + rest[1:], self._offset))
        elif rest not in (b"}", b""):
            raise InputError(self.path, f"unexpected data after the traceEvents array near byte {self._offset:,}",
                             "check that the file is one complete trace")

    def _fail(self, exc: ChunkDecodeError, buf: bytes) -> NoReturn:
        at = self._offset + max((exc.pos or 1) - 1, 0)
        raise InputError(self.path, f"invalid JSON at byte {at:,}: {exc}",
                         "the trace may be damaged; use --salvage to keep the readable events")


class _NeedMore(Exception):
    pass


_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


def _array_end(buf: bytes) -> int | None:
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
