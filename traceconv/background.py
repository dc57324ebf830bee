"""One background thread for blocking writes (Parquet, Arrow IPC release the GIL while encoding).

The producer hands work over through a queue of bounded depth, so at most ``depth``
batches wait in memory (``depth=0``: none waits; :meth:`put` returns once the thread has
taken the batch); an exception in the thread is re-raised in the producer.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any


class BackgroundWriter:
    def __init__(self, write: Callable[[Any], None], depth: int = 2) -> None:
        self._write = write
        self._handoff = depth == 0
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max(depth, 1))
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None  # started by the first put()

    def _start(self) -> None:
        """The thread starts with the first batch, not before: its C allocations come from a
        malloc arena of its own, which glibc takes from the arenas of threads already ended
        (the reader's read-ahead, whose freed memory is kept there) rather than adding one."""
        self._thread = threading.Thread(target=self._run, name="traceconv-writer", daemon=True)
        self._thread.start()

    _STOP = object()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            self._queue.task_done()  # taken: a handing-over put() may return
            if item is self._STOP:
                return
            if self._error is None:
                try:
                    self._write(item)
                except BaseException as exc:  # handed to the producer in put()/close()
                    self._error = exc
            del item  # not kept while waiting for the next: a batch is freed once written

    def put(self, item: Any) -> None:
        self._raise()
        if self._thread is None:
            self._start()
        self._queue.put(item)
        if self._handoff:
            self._queue.join()

    def close(self) -> None:
        """Wait for everything queued to be written; re-raise the thread's error."""
        if self._thread is not None:
            self._queue.put(self._STOP)
            self._thread.join()
        self._raise()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error
