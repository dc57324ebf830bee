"""The read-ahead thread: the next blocks of the input, read (and decompressed) while the caller parses."""

from __future__ import annotations

import queue
import threading
from typing import IO

BLOCK = 1 << 20  # bytes read per I/O call


class Prefetch:
    """Reads (and decompresses) the next blocks in a thread while the caller parses: zlib and
    file reads release the GIL, so gzip input costs little more than plain JSON."""

    def __init__(self, fh: IO[bytes], depth: int = 2) -> None:
        self._fh = fh
        self._raw = getattr(fh, "fileobj", None)
        self._queue: queue.Queue[tuple[bytes, int | None, BaseException | None]] = queue.Queue(depth)
        self._stop = threading.Event()
        self._position = 0
        self._done = False
        self._thread = threading.Thread(target=self._run, name="traceconv-read", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self._fh.read(BLOCK)
                item: tuple[bytes, int | None, BaseException | None] = (
                    data,
                    self._raw.tell() if self._raw is not None else None,
                    None,
                )
            except BaseException as exc:  # handed to the parser, which decides
                item, data = (b"", None, exc), b""
            while not self._stop.is_set():
                try:
                    self._queue.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if not data:
                return

    def read(self) -> tuple[bytes, int | None]:
        """The next block and the compressed bytes consumed so far (None for plain files)."""
        if self._done:
            return b"", None
        data, compressed, error = self._queue.get()
        if error is not None:
            self._done = True
            raise error
        if not data:
            self._done = True
        self._position = compressed if compressed is not None else self._position + len(data)
        return data, compressed

    def tell(self) -> int:
        return self._position

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
