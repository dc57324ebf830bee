"""One background thread for blocking writes (Parquet, Arrow IPC release the GIL while encoding).

The producer hands work over through a queue of bounded depth, so at most ``depth``
batches wait in memory; an exception in the thread is re-raised in the producer.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any


class BackgroundWriter:
    def __init__(self, write: Callable[[Any], None], depth: int = 2) -> None:
        self._write = write
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="traceconv-writer", daemon=True)
        self._thread.start()

    _STOP = object()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is self._STOP:
                return
            if self._error is None:
                try:
                    self._write(item)
                except BaseException as exc:  # handed to the producer in put()/close()
                    self._error = exc

    def put(self, item: Any) -> None:
        self._raise()
        self._queue.put(item)

    def close(self) -> None:
        """Wait for everything queued to be written; re-raise the thread's error."""
        self._queue.put(self._STOP)
        self._thread.join()
        self._raise()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error
