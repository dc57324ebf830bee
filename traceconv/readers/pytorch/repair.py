"""What Kineto really wrote: repair the invalid-JSON dialects of older versions, salvage damage.

Kineto writes JSON as text (``ChromeTraceLogger``), and older versions wrote names with
unescaped ``"`` or ``\\``, raw control bytes and invalid UTF-8 (from Python frames), bare
``inf``/``NaN``/``N/A`` and trailing commas. A chunk that fails to decode is repaired
where the meaning is unambiguous; each repair is counted. What still fails is either an
error (with its byte offset) or, with ``--salvage``, skipped event by event.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable

from traceconv.readers.pytorch.cuts import CUT, EVENT_END
from traceconv.readers.pytorch.damage import ChunkDecodeError, Damage, bad_cut
from traceconv.readers.pytorch.decode import Decoded

_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f]")
_STRING_ON_LINE = re.compile(rb'"(?:[^"\\\n]|\\.)*"')  # tabs and CRs inside are not JSON
_ESCAPE = re.compile(rb'\\(u[0-9a-fA-F]{4}|["\\/bfnrt]|.?)', re.S)
_BARE = re.compile(rb"(?<=[:\[,])(\s*)(-?inf(?:inity)?|-?Infinity|NaN|nan|N/A)(?=\s*[,}\]])")
_TRAILING_COMMA = re.compile(rb",(\s*[}\]])")
# A name value on one line of Kineto output: up to the first `", "<key>":` or the end of the line.
_NAME_LINE = re.compile(rb'("name":\s*")(.*?)("(?:\s*,\s*"[\w ]+"\s*:|\s*,?\s*$))', re.M)
_LONE_QUOTE = re.compile(rb'(?<!\\)"')
# An event's own keys after `", `: a "name" that would take them in is damage, not a name with quotes.
_SWALLOWED_KEY = re.compile(rb'"\s*,\s*"(?:ph|cat|ts|dur|tts|pid|tid|args|id|bp|s|cname)"')


Repair = Callable[[bytes], tuple[bytes, int]]


def _changed(pattern: re.Pattern[bytes], fix: Callable[[re.Match[bytes]], bytes]) -> Repair:
    """A repair that counts only the matches it actually changes."""

    def repair(data: bytes) -> tuple[bytes, int]:
        count = 0

        def counted(m: re.Match[bytes]) -> bytes:
            nonlocal count
            out = fix(m)
            count += out != m.group(0)
            return out

        return pattern.sub(counted, data), count

    return repair


def _fix_escape(m: re.Match[bytes]) -> bytes:
    tail = m.group(1)
    if len(tail) == 5 or (len(tail) == 1 and tail in b'"\\/bfnrt'):
        return m.group(0)
    return b"\\\\" + tail


def _fix_name(m: re.Match[bytes]) -> bytes:
    if _SWALLOWED_KEY.search(m.group(2)):  # e.g. `"name": "x", "ph"z "M", "ts": ...` (a flipped ':')
        return m.group(0)
    return m.group(1) + _LONE_QUOTE.sub(rb'\\"', m.group(2)) + m.group(3)


def _utf8(chunk: bytes) -> tuple[bytes, int]:
    try:
        chunk.decode("utf-8")
        return chunk, 0
    except UnicodeDecodeError:
        text = chunk.decode("utf-8", errors="replace")
        return text.encode("utf-8"), text.count("\ufffd") - chunk.decode("utf-8", "ignore").count("\ufffd")


# (label, repair) in the order they are tried; each returns the new bytes and a count.
REPAIRS: tuple[tuple[str, Callable[[bytes], tuple[bytes, int]]], ...] = (
    ("invalid UTF-8 bytes replaced", _utf8),
    ("raw control bytes escaped", lambda b: _CONTROL.subn(lambda m: b"\\u%04x" % m.group(0)[0], b)),
    (
        "raw tab and CR control characters in strings escaped",
        _changed(_STRING_ON_LINE, lambda m: m.group(0).replace(b"\t", b"\\t").replace(b"\r", b"\\r")),
    ),
    ("unescaped quotes in names escaped", _changed(_NAME_LINE, _fix_name)),
    ("invalid backslash escapes doubled", _changed(_ESCAPE, _fix_escape)),
    ("bare inf/NaN/N/A values quoted", lambda b: _BARE.subn(rb'\1"\2"', b)),
    ("trailing commas removed", lambda b: _TRAILING_COMMA.subn(rb"\1", b)),
)


class RobustDecoder:
    """Wraps a strict chunk decoder with repairs and (optionally) event-level salvage."""

    def __init__(self, decode: Callable[[bytes], Decoded], damage: Damage, salvage: bool) -> None:
        self._decode = decode
        self.damage = damage
        self.salvage = salvage
        self.repairs: Counter[str] = Counter()
        self.chunk_offset = 0  # absolute offset of the chunk being decoded (for damage reports)

    def __call__(self, chunk: bytes) -> Decoded:
        try:
            return self._decode(chunk)
        except ChunkDecodeError as exc:
            if bad_cut(exc, len(chunk)):
                raise
            first = exc
        repaired = self._repair(chunk)
        if repaired is not None:
            return repaired
        if not self.salvage:
            raise first
        return self._skip_damage(chunk, max((first.pos or 1) - 1, 0))

    def _repair(self, chunk: bytes) -> Decoded | None:
        applied: Counter[str] = Counter()
        fixed = chunk
        for label, repair in REPAIRS:
            fixed, count = repair(fixed)
            if not count:
                continue
            applied[label] += count
            try:
                decoded = self._decode(fixed)
            except ChunkDecodeError:
                continue
            self.repairs.update(applied)
            return decoded
        return None

    def _skip_damage(self, chunk: bytes, at: int) -> Decoded:
        """Keep the events before the damaged one and resynchronise at the next event."""
        parts: list[Decoded] = []
        head_end = 0
        for end in reversed([m.start() + 1 for m in EVENT_END.finditer(chunk, 0, at)][-16:]):
            try:
                parts.append(self._strict_or_repaired(chunk[:end]))
                head_end = end
                break
            except ChunkDecodeError:
                continue
        resume = CUT.search(chunk, max(at, head_end))
        skip_to = resume.end() - 1 if resume else len(chunk)
        self.damage.skip(self.chunk_offset + head_end, skip_to - head_end)
        if resume is not None:
            rest = chunk[skip_to:]
            saved, self.chunk_offset = self.chunk_offset, self.chunk_offset + skip_to
            try:
                parts.append(self(rest))
            finally:
                self.chunk_offset = saved
        return Decoded.concat(parts)

    def _strict_or_repaired(self, chunk: bytes) -> Decoded:
        try:
            return self._decode(chunk)
        except ChunkDecodeError:
            repaired = self._repair(chunk)
            if repaired is None:
                raise
            return repaired
