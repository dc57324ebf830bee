"""Gzip input, streamed: every byte decompressed before a cut or damage is handed out first.

Traces are recognised as gzip by their magic number, not by their name. Intel ISA-L
(``isal``) inflates with zlib's streaming API, faster; zlib where no wheel exists.
"""

from __future__ import annotations

import zlib
from pathlib import Path
from types import ModuleType
from typing import IO

from traceconv.readers.base import GZIP_MAGIC

try:  # Intel ISA-L: the same streaming API as zlib, faster inflating (bench/README.md)
    from isal import isal_zlib as _inflate
except ImportError:  # pragma: no cover - machines without an isal wheel
    _inflate: ModuleType = zlib  # type: ignore[no-redef]
_INFLATE_ERROR: type[BaseException] = getattr(_inflate, "error", zlib.error)
GZIP_ERRORS = (OSError, EOFError, zlib.error, _INFLATE_ERROR)
READ = 1 << 20  # compressed bytes read at a time


def open_binary(path: Path) -> IO[bytes]:
    """Open a trace, transparently decompressing gzip by magic number (not by extension)."""
    fh = open(path, "rb")  # noqa: SIM115 - returned open, closed by the caller's with-block
    magic = fh.read(2)
    fh.seek(0)
    if magic == GZIP_MAGIC:
        return Gunzip(fh)  # type: ignore[return-value]
    return fh


class Gunzip:
    """Streaming gzip (all members) that hands out every byte decompressed before a cut or
    damage, then raises: ``gzip.GzipFile`` loses the block in which the stream ends early."""

    def __init__(self, fileobj: IO[bytes]) -> None:
        self.fileobj = fileobj
        self._d = _inflate.decompressobj(31)
        self._fed = False  # has the current member's decompressor seen any input?
        self._input = b""
        self._error: BaseException | None = None

    def read(self, size: int) -> bytes:
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        out: list[bytes] = []
        have = 0
        while have < size:
            try:
                data = self._more()
                if data is None:
                    break
                piece = self._d.decompress(data, size - have)
                self._fed = True
            except GZIP_ERRORS as exc:
                if not out:
                    raise
                self._error = exc  # first the good bytes, the error on the next call
                break
            self._input = self._d.unconsumed_tail
            out.append(piece)
            have += len(piece)
            if self._d.eof:
                rest = self._d.unused_data.lstrip(b"\x00")  # another member may follow
                self._d, self._input, self._fed = _inflate.decompressobj(31), rest, False
        return b"".join(out)

    def _more(self) -> bytes | None:
        """Compressed input to feed next; None at a clean end; EOFError at a cut."""
        if self._input:
            return self._input
        data = self.fileobj.read(READ)
        if data:
            return data
        if self._d.eof or not self._fed:  # at a member boundary: a clean end
            return None
        raise EOFError("the compressed stream ends before its end marker")

    def close(self) -> None:
        self.fileobj.close()

    def __enter__(self) -> Gunzip:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
