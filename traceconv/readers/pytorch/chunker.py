"""Split a Chrome trace JSON document into bounded chunks of whole events, without a full parse.

The document is ``{... "traceEvents": [ev, ev, ...] ...}`` (or a bare ``[ev, ...]``).
Kineto writes it as text, so we find event boundaries with a byte pattern (``}`` ``,``
``{`` at the top level of the array) and let the decoder confirm each cut: a cut inside a
nested value or a string leaves unbalanced JSON, which the decoder rejects at the very
end of the chunk (a "bad cut"), and we move the cut to the next candidate. Any other
decode error is a defect of the input; the decoder repairs or salvages it, or we report
it with its absolute byte offset.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterator, Sized
from pathlib import Path
from typing import Any, NoReturn

import orjson

from traceconv.errors import InputError, UnsupportedFormatError
from traceconv.readers.pytorch.cuts import CUT, EVENT_END, Positioned, Span, array_end, first_match, prefix, skip_ws
from traceconv.readers.pytorch.damage import ChunkDecodeError, Damage, Document, bad_cut
from traceconv.readers.pytorch.gunzip import GZIP_ERRORS, open_binary
from traceconv.readers.pytorch.prefetch import Prefetch

# Target bytes of events decoded at once. A chunk being decoded and built takes several times
# its size in a process, and each process's heap keeps room for about that much: smaller chunks,
# less memory, for a fixed cost per chunk.
CHUNK = 1 << 20
MAX_HEADER = 64 << 20  # bytes of top-level keys allowed before "traceEvents"
MAX_EVENT = 256 << 20  # a single event larger than this is hostile, not a trace
MAX_RATIO = 1000  # decompressed/compressed beyond this (and past MAX_EVENT bytes) is a gzip bomb

_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')


class EventChunks:
    """Iterate over decoded chunks of events.

    ``decode(chunk) -> Sized`` decodes ``b"[" + chunk + b"]"`` (repairing what it can)
    and raises :class:`ChunkDecodeError` on failure. ``progress(n)`` gets raw bytes read.
    With ``salvage``, truncation and damage keep every complete event and are recorded
    in :attr:`damage` instead of raising.

    ``positioned`` (a plain file whose chunks the caller's workers read again themselves, as
    pass 1's do): the file is not read through; each cut is looked for in a few bytes read at
    its position, and ``decode`` gets a :class:`Span` (the chunk's place; ``bytes(span)`` reads
    it). The cuts are those of the reading path, which holds a block-at-a-time buffer, for a
    ``decode`` that does not confirm them (never raises :class:`ChunkDecodeError`): the caller's
    workers decode each chunk and, where a cut was bad, the trace is read again the usual way.
    """

    def __init__(
        self,
        path: Path,
        decode: Callable[[bytes], Sized],
        progress: Callable[[int], None] | None = None,
        chunk_size: int = CHUNK,
        salvage: bool = False,
        positioned: bool = False,
    ) -> None:
        self.path = path
        self.positioned = positioned
        self.decode = decode
        self.progress = progress
        self.chunk_size = chunk_size
        self.salvage = salvage
        self.document = Document()
        self.damage = Damage()
        self.events = 0  # events yielded so far
        self._offset = 0  # absolute offset (decompressed) of buf[0]
        self._decompressed = 0
        self._cut_short: str | None = None

    @property
    def offset(self) -> int:
        """Absolute (decompressed) byte offset of the chunk being decoded."""
        return self._offset

    def __iter__(self) -> Iterator[Any]:
        try:
            fh = open_binary(self.path)
        except OSError as exc:
            raise InputError(self.path, f"cannot be read ({exc.strerror or exc})", "check the path") from exc
        with fh:
            plain = isinstance(fh, io.BufferedReader)
            blocks: Prefetch | Positioned = Positioned(fh) if self.positioned and plain else Prefetch(fh)
            try:
                buf, eof = self._header(blocks)
                if isinstance(blocks, Positioned):
                    events = self._events_positioned(blocks, eof)
                else:
                    events = self._events(blocks, buf, eof)
                for decoded in events:
                    self.events += len(decoded)
                    yield decoded
            finally:
                blocks.close()

    # -- reading --------------------------------------------------------------------
    def _read(self, fh: Prefetch | Positioned) -> bytes:
        if self._cut_short:
            return b""
        try:
            data, compressed = fh.read()
        except GZIP_ERRORS as exc:
            # A gzip stream cut short or damaged: what came before it is still good.
            self._cut_short = f"the gzip stream is damaged or cut short after {self._decompressed:,} bytes ({exc})"
            return b""
        self._decompressed += len(data)
        if compressed and self._decompressed > MAX_EVENT and self._decompressed > MAX_RATIO * compressed:
            raise InputError(
                self.path,
                f"decompresses to over {MAX_RATIO}x its size "
                f"({self._decompressed:,} bytes from {compressed:,}); refusing a likely gzip bomb",
                "decompress it yourself if you trust it",
            )
        return data

    # -- header ---------------------------------------------------------------------
    def _header(self, fh: Prefetch | Positioned) -> tuple[bytearray, bool]:
        buf = bytearray()
        eof = False
        while True:
            start = skip_ws(buf, 0)
            if start < len(buf) and buf[start] == ord("["):
                self._offset = start + 1
                return buf[start + 1 :], eof
            if start < len(buf) and buf[start] != ord("{"):
                raise UnsupportedFormatError(
                    self.path,
                    f"not a JSON trace (starts with {bytes(buf[start : start + 10])!r})",
                    "give a PyTorch profiler trace (.json or .json.gz) or an Nsight Systems file",
                )
            m = _EVENTS_KEY.search(buf)
            if m:
                head = bytes(buf[: m.start()]).rstrip().rstrip(b",")
                self.document.top.update(self._parse_object(head + b"}", 0))
                self._offset = m.end()
                return buf[m.end() :], eof
            if eof or len(buf) > MAX_HEADER:
                self._no_events(buf, eof)
            more = self._read(fh)
            eof = not more
            buf += more

    def _no_events(self, buf: bytearray, eof: bool) -> NoReturn:
        if not buf.strip():
            raise InputError(
                self.path,
                "is empty" + (f" ({self._cut_short})" if self._cut_short else ""),
                "the profiler may not have finished writing it",
            )
        if eof and self._cut_short:
            raise InputError(self.path, self._cut_short + ", before the traceEvents array", "re-copy the file")
        where = "in the first 64 MiB" if not eof else "in the file"
        raise UnsupportedFormatError(
            self.path, f'no "traceEvents" array {where}', "is this a PyTorch profiler / Chrome trace JSON?"
        )

    def _parse_object(self, text: bytes, at: int) -> dict[str, Any]:
        try:
            obj = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            if self.salvage:
                self.damage.notes.append(f"top-level keys near byte {at:,} are damaged and were skipped")
                return {}
            raise InputError(
                self.path,
                f"invalid JSON in the top-level keys near byte {at + exc.pos:,}: {exc.msg}",
                "check that the file is a complete trace, or use --salvage",
            ) from exc
        if not isinstance(obj, dict):
            raise UnsupportedFormatError(self.path, "top level is not a JSON object", "give a trace file")
        return obj

    # -- events ---------------------------------------------------------------------
    def _events(self, fh: Prefetch, buf: bytearray, eof: bool) -> Iterator[Sized]:
        pos = skip_ws(buf, 0)
        del buf[:pos]
        self._offset += pos
        want = 2 * self.chunk_size
        while True:
            if self.progress is not None:
                self.progress(fh.tell())
            if not eof and len(buf) < want:
                more = self._read(fh)
                eof = not more
                buf += more
                continue
            cut = self._cut(buf, eof)
            if cut is None and not eof:  # one event is larger than the buffer: read on
                if len(buf) > MAX_EVENT:
                    raise InputError(
                        self.path,
                        f"an event at byte {self._offset:,} is larger than {MAX_EVENT >> 20} MiB",
                        "this is not a trace as PyTorch writes it",
                    )
                # Twice the buffer, not two chunks more: each round scans the buffer again, so
                # an event of n bytes costs O(n), not O(n^2 / chunk); up to MAX_EVENT and a chunk.
                want = min(max(len(buf) + 2 * self.chunk_size, 2 * len(buf)), MAX_EVENT + self.chunk_size)
                continue
            want = 2 * self.chunk_size
            if cut is None:  # only the end of the array (and the document) is left
                yield from self._finish(bytes(buf))
                return
            next_start, decoded = cut
            yield decoded
            self._offset += next_start
            del buf[:next_start]

    def _events_positioned(self, fh: Positioned, eof: bool) -> Iterator[Sized]:
        """:meth:`_events` without its buffer: the buffer's bounds (the chunk's start, and the
        end of the blocks the reading path would hold) are kept, and bytes are read only where
        a cut is looked for, and at the end of the array."""
        start = self._offset
        while start < fh.tell() and fh.at(start, 1) in (b" ", b"\t", b"\r", b"\n"):
            start += 1
        self._offset = start
        want = 2 * self.chunk_size
        while True:
            if self.progress is not None:
                self.progress(fh.tell())
            n = fh.tell() - start  # the length of the buffer the reading path would hold
            if not eof and n < want:
                eof = not fh.skip()
                continue
            found = None
            if not (eof and 2 * n <= 3 * self.chunk_size):
                match = first_match(fh, start + min(self.chunk_size, max(n - 1, 0)), start + n)
                if match is not None:
                    end, next_start = match
                    found = next_start - start, self.decode(Span(fh, start, end - start))  # type: ignore[arg-type]
            if found is None and eof:
                found = self._last_cut(fh.at(start, n))
            if found is None and not eof:  # one event is larger than the buffer: read on
                if n > MAX_EVENT:
                    raise InputError(
                        self.path,
                        f"an event at byte {self._offset:,} is larger than {MAX_EVENT >> 20} MiB",
                        "this is not a trace as PyTorch writes it",
                    )
                want = min(max(n + 2 * self.chunk_size, 2 * n), MAX_EVENT + self.chunk_size)
                continue
            want = 2 * self.chunk_size
            if found is None:
                yield from self._finish(fh.at(start, n))
                return
            next_start, decoded = found
            yield decoded
            start += next_start
            self._offset = start

    def _cut(self, buf: bytearray, eof: bool) -> tuple[int, Sized] | None:
        """Decode the shortest prefix ending at a confirmed cut beyond the target size.

        At the end of input the rest goes as one chunk once it is at most 1.5 chunks; the
        read-ahead leaves up to two chunks and a block there, which decoded at once would
        need that much more memory, at the end of every trace.
        """
        if eof and 2 * len(buf) <= 3 * self.chunk_size:
            return self._last_cut(buf)
        found = self._first_cut(buf, strict=not eof)
        return self._last_cut(buf) if found is None and eof else found

    def _first_cut(self, buf: bytearray, strict: bool) -> tuple[int, Sized] | None:
        """``strict``: a failure that is not a bad cut is the trace's error. Otherwise (at the
        end of input, where a candidate may lie in the keys after the array) it is left to
        :meth:`_last_cut` and the exact bracket scan of :meth:`_finish`."""
        for m in CUT.finditer(buf, min(self.chunk_size, max(len(buf) - 1, 0))):
            end = m.start() + 1
            try:
                return m.end() - 1, self.decode(prefix(buf, end))
            except ChunkDecodeError as exc:
                if not bad_cut(exc, end):
                    if strict:
                        self._fail(exc)
                    return None
        return None

    def _last_cut(self, buf: bytearray | bytes) -> tuple[int, Sized] | None:
        """At the end of input: everything up to the last event boundary, leaving one event and the tail.

        A failure here may be a candidate inside the keys after the array; the exact
        bracket scan of :meth:`_finish` then decides.
        """
        last = None
        for last in CUT.finditer(buf):  # noqa: B007 - only the last match is wanted
            pass
        if last is None:
            return None
        try:
            return last.end() - 1, self.decode(prefix(buf, last.start() + 1))
        except ChunkDecodeError:
            return None

    def _finish(self, buf: bytes) -> Iterator[Sized]:
        end = array_end(buf)
        if end is None:
            yield from self._truncated(buf)
            return
        body = buf[:end].rstrip()
        if body.endswith(b","):  # `},\n]`: a trailing comma after the last event
            body = body[:-1].rstrip()
            self.damage.repairs["trailing commas removed"] += 1
        if body:
            try:
                yield self.decode(body)
            except ChunkDecodeError as exc:
                if not bad_cut(exc, len(body)):
                    self._fail(exc)
                yield from self._truncated(body)
        self._tail(buf[end + 1 :])

    def _truncated(self, buf: bytes) -> Iterator[Sized]:
        """No closing ``]``: keep the complete events (with --salvage) or say how many there are."""
        kept, end = self._completeprefix(buf)
        count = self.events + (len(kept) if kept is not None else 0)
        reason = self._cut_short or (
            f"truncated: the traceEvents array is never closed (data ends at byte {self._offset + len(buf):,})"
        )
        if not self.salvage:
            raise InputError(self.path, reason, f"use --salvage to keep the {count:,} complete events before it")
        self.damage.truncated = True
        self.damage.skip(self._offset + end, len(buf) - end, events=1 if buf[end:].strip(b" \t\r\n,") else 0)
        self.damage.notes.append(reason)
        if kept is not None:
            yield kept

    def _completeprefix(self, buf: bytes) -> tuple[Sized | None, int]:
        """The decoded complete events at the start of ``buf`` and where they end."""
        ends = [m.start() + 1 for m in EVENT_END.finditer(buf)]
        stripped = buf.rstrip()
        if stripped.endswith(b"}"):
            ends.append(len(stripped))
        for end in reversed(ends[-64:]):
            try:
                return self.decode(buf[:end]), end
            except ChunkDecodeError:
                continue
        return None, 0

    def _tail(self, rest: bytes) -> None:
        rest = rest.strip()
        if rest.startswith(b","):
            self.document.top.update(self._parse_object(b"{" + rest[1:], self._offset))
        elif rest not in (b"}", b""):
            if self.salvage:
                self.damage.notes.append("unexpected data after the traceEvents array was ignored")
                return
            raise InputError(
                self.path,
                f"unexpected data after the traceEvents array near byte {self._offset:,}",
                "check that the file is one complete trace",
            )
        elif rest == b"" and not self.salvage and self.document.top:
            raise InputError(
                self.path,
                "truncated after the traceEvents array (the closing } is missing)",
                f"use --salvage to keep the {self.events:,} complete events",
            )

    def _fail(self, exc: ChunkDecodeError) -> NoReturn:
        at = self._offset + max((exc.pos or 1) - 1, 0)
        what = re.sub(r"^JSON is malformed: |\s*\(byte \d+\)$", "", str(exc))
        raise InputError(
            self.path,
            f"invalid JSON at byte {at:,}: {what}",
            "the trace is damaged; use --salvage to keep the readable events",
        )
