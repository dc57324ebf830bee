"""Pass 2 on several cores: row groups linked, stamped and encoded as Parquet in forked worker processes.

Once the link index is built (the one global step), each row group is independent: its
tables are read back from the spill, linked through the index, stamped and encoded as a
Parquet row group (``parquet_join.encode``). Worker processes forked at that moment inherit
the index and the spill's entries (copy-on-write, nothing is sent); a task is a row group's
number. A worker appends each encoded row group to a temporary file of its own and replies
with where it is and its metadata; the main process takes the replies in row-group order and
copies the bytes into the output (``copy_file_range``: no copy through this process), so the
file is the one a single writer makes. When every worker has :data:`IN_FLIGHT` row groups
queued, the main process converts the next one itself (on two cores: one worker and the main
process).
"""

from __future__ import annotations

import contextlib
import os
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from traceconv.parquet_join import Piece
from traceconv.readers.pytorch.spill import APPEND, temporary_path
from traceconv.readers.pytorch.workers import IN_FLIGHT, Workers, answer_tasks, fork_worker, next_worker, start_worker

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

# A row group's number -> its encoded row group and what else the caller wants back (picklable).
Convert = Callable[[int], tuple[Piece, Any]]
# A row group's number, once it is converted for good: what only it read may go (its spill pages).
Release = Callable[[int], None]
Done = tuple[Piece, "int | None", Any]  # the piece, the file its bytes are in (None: in piece.data), extra


def _serve(conn: Connection, convert: Convert, release: Release, path: str, inherited: list[Connection]) -> None:
    start_worker(inherited)
    with open(path, APPEND) as out:

        def written(task: int) -> tuple[Piece, Any]:
            piece, extra = convert(task)
            assert piece.data is not None
            piece.pos = out.tell()
            out.write(piece.data)
            out.flush()  # before the reply: the main process copies from the file
            piece.data = None
            return piece, extra

        # A failed row group is converted again by the main process, which raises its error; one
        # answered is not, so only then may what it alone read go.
        answer_tasks(conn, lambda task: task, written, release)


class GroupPool(Workers):
    """Up to ``workers`` forked processes running ``convert``, started as row groups come;
    :meth:`map` yields results in order. ``release`` is called with each row group's number once
    it is converted and its result kept (in the process that converted it)."""

    def __init__(self, workers: int, convert: Convert, release: Release = lambda number: None) -> None:
        import multiprocessing

        # The workers encode Parquet: pyarrow's Parquet module is loaded once here, before the
        # forks, not by each worker as its first row group waits (~2 ms each on the 16-core host,
        # its pages then private to each).
        with contextlib.suppress(ImportError):
            import pyarrow._parquet  # noqa: F401

        super().__init__()
        ctx = multiprocessing.get_context("fork")
        self._ctx, self._workers, self._convert, self._release = ctx, workers, convert, release
        self._procs: list[Any] = []
        self._files: list[str] = []
        self._fds: list[int] = []
        self._load: list[int] = []  # per worker started: row groups sent and not yet answered
        self._sent: list[deque[int]] = []  # per worker started: those row groups, in order
        self.converted_here = 0

    def _start(self) -> int:
        """Fork the next worker (as row groups come: see ``workers.ChunkPool._start``)."""
        path = temporary_path()
        self._files.append(path)
        args = (self._convert, self._release, path)
        self._procs.append(fork_worker(self._ctx, _serve, args, self._conns, "traceconv-pass2"))
        self._fds.append(os.open(path, os.O_RDONLY))
        self._load.append(0)
        self._sent.append(deque())
        return len(self._conns) - 1

    def map(self, count: int) -> Iterator[Done]:
        """Row groups 0 .. count-1, converted, in order. Replies are taken from whichever worker
        has one, so that a worker that is done gets the next row group at once (taken in order,
        the first workers forked, done first, were given more than the last, which then waited)."""
        order: deque[int] = deque()  # row groups sent or converted, not yet yielded
        done: dict[int, Done] = {}
        load = self._load
        for group in range(count):
            self._receive(done, block=False)
            while order and order[0] in done:
                yield done.pop(order.popleft())
            order.append(group)
            worker = next_worker(load, self._workers, self._start) if self._workers else -1
            if worker < 0 or load[worker] >= IN_FLIGHT:
                piece, extra = self._here(group)
                done[group] = piece, None, extra
                self.converted_here += 1
                continue
            self._conns[worker].send(group)
            self._sent[worker].append(group)
            load[worker] += 1
        self.stop()  # every row group is sent: each worker ends once it has answered its own
        while order:
            if order[0] not in done:
                self._receive(done, block=True)
                continue
            yield done.pop(order.popleft())

    def _receive(self, done: dict[int, Done], block: bool) -> None:
        """The replies that have come (``block``: at least one), into ``done`` by row group."""
        from multiprocessing.connection import wait

        busy = [conn for conn, load in zip(self._conns, self._load, strict=True) if load]
        if not busy:
            return
        ready = wait(busy, timeout=None if block else 0)
        for worker, conn in enumerate(self._conns):
            if conn not in ready:
                continue
            try:
                seq, ok, piece, extra = conn.recv()
            except (EOFError, OSError) as exc:
                raise RuntimeError(f"a pass-2 worker stopped ({exc or 'no reply'})") from None
            group = self._sent[worker].popleft()  # a worker answers its row groups in the order sent
            self._load[worker] -= 1
            assert seq == group, (seq, group)
            if not ok:  # the same work here raises the error with its traceback
                piece, extra = self._here(group)
                done[group] = piece, None, extra
            else:
                done[group] = piece, self._fds[worker], extra

    def _here(self, group: int) -> tuple[Piece, Any]:
        """A row group converted in this process (its bytes kept in the piece), for good."""
        result = self._convert(group)
        self._release(group)
        return result

    def close(self, kill: bool = False) -> None:
        self.stop()
        for proc in self._procs:
            if kill:
                proc.kill()
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join()
        for conn in self._conns:
            conn.close()
        for fd in self._fds:
            os.close(fd)
        for path in self._files:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        self._conns, self._procs, self._fds, self._files = [], [], [], []

    def __enter__(self) -> GroupPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(kill=exc[0] is not None)
