"""Pass 1 on several cores: chunks of a Kineto trace decoded and built in worker processes.

Decoding JSON into Python objects holds the GIL, so threads cannot share it; forked worker
processes can. The main process keeps reading and cutting the trace (in file order) and
hands each chunk to a worker; the worker decodes it and builds its unified columns exactly
as the single-process path does, writes the table to a temporary Arrow file of its own (and
the operator rows the link index takes later: ``op_rows.OpRows``) and sends back the API call and
GPU rows the link index needs. When every worker already has its queue full,
the main process converts the chunk itself, the same way (so on two cores: one worker and
the main process). The main process takes the results in chunk order, so everything that
depends on order (event ids, the link index, the spill) is what one process would have
produced.

The workers decode strictly and repair older Kineto's invalid JSON chunk by chunk, as one
process does. A chunk cut inside a string, damage no repair mends, or anything unexpected
makes the worker report failure, and the caller then converts the whole trace again in one
process (:class:`Unsuitable`), which handles every irregular case (other cuts, --salvage,
the exact error message).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import signal
import sys
import warnings
from collections import Counter, deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from traceconv.process import available_memory, keep_freed_memory
from traceconv.readers.pytorch.columns import ChunkContext, build
from traceconv.readers.pytorch.cuts import Span
from traceconv.readers.pytorch.damage import Damage
from traceconv.readers.pytorch.decode import Decoded
from traceconv.readers.pytorch.link_rows import Prepared, extract, prepare, raw_ops
from traceconv.readers.pytorch.repair import RobustDecoder
from traceconv.readers.pytorch.spill import APPEND, SegmentFile, min_start, temporary_path

if TYPE_CHECKING:  # multiprocessing is imported when workers are started (small traces never are)
    from multiprocessing.connection import Connection

IN_FLIGHT = 2  # chunks queued per worker: enough to keep it busy, few enough to bound memory
# Beyond this many the main process (reading, cutting and indexing in pass 1) is the limit
# (bench/README.md, the scaling curve).
MAX_WORKERS = 32
# What a worker may add to the tree's memory at its peak (a pass-2 row group linked and
# encoded; bench/README.md has the measured figure): the default takes no more workers than
# half the memory available holds.
WORKER_MEMORY = 64 << 20


class Unsuitable(Exception):
    """The parallel path cannot convert this trace exactly; convert it in one process."""


def worker_count(requested: int | None) -> int:
    """Worker processes: ``requested`` if given, else one per usable core but this process's
    (none on one core; the main process converts chunks and row groups itself while every
    worker is busy), no more than half the available memory holds at :data:`WORKER_MEMORY` each."""
    if sys.platform != "linux" or not hasattr(os, "fork"):
        return 0  # fork is what makes the workers cheap; elsewhere the single process is used
    if requested is not None:
        return max(requested, 0)
    cores = len(os.sched_getaffinity(0))
    return max(min(cores - 1, MAX_WORKERS, available_memory() // 2 // WORKER_MEMORY), 0)


Taken = tuple[int, dict[str, Any], Prepared]  # worker, what it wrote, rows for the link index


# glibc keeps this much freed memory in each worker: each chunk allocates and frees about the
# same amount, and returning it each time costs the workers their time in page faults.
TOP_PAD = 64 << 20


def _read_task(path: str, offset: int, length: int, handed_over: bool) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        data = os.pread(fd, length, offset)
    finally:
        os.close(fd)
        if handed_over:
            os.unlink(path)
    if len(data) != length:
        raise OSError(f"{path} changed while it was read")
    return data


PR_SET_PDEATHSIG = 1  # Linux prctl option


def start_worker(inherited: list[Connection]) -> None:
    """What a forked worker does first: leave Ctrl-C to the main process, die with it, and keep
    the collector and the allocator from touching (and so copying) what it inherited."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the main process decides when to stop
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    orphan_proof(inherited)
    # Decoding makes millions of objects without cycles; a collection would also walk (and so
    # copy, page by page) every object inherited from the main process.
    gc.disable()
    keep_freed_memory(TOP_PAD)


def answer_tasks(
    conn: Connection,
    key: Callable[[Any], Any],
    handle: Callable[[Any], tuple[Any, Any]],
    answered: Callable[[Any], None] = lambda task: None,
) -> None:
    """A worker's loop: each task from the main process answered ``(key(task), True, *handle(task))``,
    or ``(key(task), False, "Type: message", None)`` where ``handle`` raised (the main process then
    does that task itself, with the exact error); until the main process sends None or goes away.
    ``answered(task)`` runs once a task's success is sent (the main process will not do it again);
    what it raises is ignored."""
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            break
        if task is None:
            break
        try:
            conn.send((key(task), True, *handle(task)))
        except Exception as exc:
            conn.send((key(task), False, f"{type(exc).__name__}: {exc}", None))
            continue
        with contextlib.suppress(Exception):
            answered(task)


def orphan_proof(inherited: list[Connection]) -> None:
    """Die with the main process, however it ends (killed, out of memory): Linux sends this
    process SIGKILL then. And close the main process's ends of every pipe inherited by fork:
    held open here, they would keep another worker (or this one) waiting for input forever."""
    for conn in inherited:
        conn.close()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() == 1:  # the main process is already gone
        os._exit(0)


class _Converter:
    """Decode and build one chunk, write its table to a file of spill segments, and return what
    the main process takes: where the table is and the rows for the link index. The same in a
    worker and in the main process (which converts a chunk itself when every worker is busy)."""

    def __init__(self, strict: Callable[[bytes, bool], Decoded], out: SegmentFile) -> None:
        self._strict = strict
        self.out = out

    def __call__(self, chunk: bytes, unpadded: bool) -> tuple[dict[str, Any], Prepared]:
        # Repairs of older Kineto's invalid JSON are chunk by chunk, as in one process; a cut
        # inside a string, or damage no repair mends, goes back to the main process.
        robust = RobustDecoder(lambda data: self._strict(data, unpadded), Damage(), salvage=False)
        decoded = robust(chunk)
        repairs = Counter(robust.repairs)
        table = build(decoded, ChunkContext(0, decoded.exact, unpadded, repairs))
        del decoded
        pos, length = self.out.write(table)  # only the columns with values (schema.present)
        info = {"pos": pos, "length": length, "rows": table.num_rows, "start": min_start(table)}
        info["repairs"] = dict(repairs)
        parts = prepare(extract(table))
        ops = parts.pop("ops", None)
        if ops is not None:  # to the file too: the main process takes only their texts (OpRows)
            raw, parts["op_texts"] = raw_ops(ops)
            parts["ops_at"] = (*self.out.write(raw), raw.num_rows)
        return info, parts


def _serve(conn: Connection, strict: Callable[[bytes, bool], Decoded], path: str, inherited: list[Connection]) -> None:
    """Worker loop: a task names the chunk's bytes in a file; its table goes to ``path``, its link rows back.

    Chunks travel as file positions, not through the pipe: the trace itself for plain JSON
    (the page cache has it), a file handed over by the main process for decompressed gzip.
    Tasks are a few bytes, so the main process never blocks sending one (no deadlock); a
    reply (the link rows) waits in the pipe until the main process takes it, in chunk order.
    """
    start_worker(inherited)
    convert = _Converter(strict, SegmentFile(path))
    # a failed chunk is reported; the main process then falls back to one process
    answer_tasks(conn, lambda task: task[0], lambda task: convert(_read_task(*task[2]), task[1]))
    convert.out.close_writer()


def fork_worker(ctx: Any, serve: Callable[..., None], args: tuple[Any, ...], conns: list[Connection], name: str) -> Any:
    """Fork a worker running ``serve(its end of a new pipe, *args, the ends it inherits)``; the
    main process's end is appended to ``conns``, the process returned."""
    with warnings.catch_warnings():
        # Python 3.12+ warns about fork() in a process with threads (pass 1 forks while the read-ahead
        # thread of a .gz input runs); the children only run their serve loop, which touches no lock
        # another thread may hold (no logging, no imports, not the read-ahead's file or queue).
        warnings.simplefilter("ignore", DeprecationWarning)
        parent, child = ctx.Pipe(duplex=True)
        inherited = [*conns, parent]  # the main process's ends the child gets by fork
        proc = ctx.Process(target=serve, args=(child, *args, inherited), daemon=True, name=name)
        proc.start()
        child.close()
    conns.append(parent)
    return proc


class Workers:
    """What both pools do with their workers' pipes: tell them, once, that no more tasks come."""

    def __init__(self) -> None:
        self._conns: list[Connection] = []
        self._stopped = False

    def stop(self) -> None:
        """No more tasks: each worker ends once it has answered those it has (its exit, which frees
        its memory, overlaps this process taking the last results rather than following it)."""
        if not self._stopped:
            self._stopped = True
            for conn in self._conns:
                with contextlib.suppress(OSError):  # one that has already gone
                    conn.send(None)


def next_worker(load: list[int], most: int, start: Callable[[], int]) -> int:
    """Of workers with ``load`` tasks each (``most`` of them at most, ``start()`` forks the next and
    gives its number): a new one while there is room and every one started has a task, else the
    least loaded (the first of them)."""
    if len(load) < most and (not load or min(load) >= 1):
        return start()
    return min(range(len(load)), key=load.__getitem__)


class ChunkPool(Workers):
    """Worker processes that decode and build chunks; results come back in submission order.

    With ``local`` (a segment file of its own), this process converts a chunk itself whenever
    every worker already has :data:`IN_FLIGHT` chunks: on two cores, one worker and this
    process together are as fast as two workers beside it, with one process fewer.
    Where this process is the bottleneck (many cores), the workers' queues never fill and
    it never converts.
    """

    def __init__(
        self, paths: list[str], strict: Callable[[bytes, bool], Decoded], local: SegmentFile | None = None
    ) -> None:
        import multiprocessing

        # pyarrow imports numpy.ma on its first array made from numpy: once here, before the
        # fork, rather than in every worker as its first chunk waits (~50 ms on a 16-core host).
        import numpy.ma  # noqa: F401

        super().__init__()
        self._ctx = multiprocessing.get_context("fork")
        self._paths, self._strict = paths, strict
        self._procs: list[Any] = []
        self._local = _Converter(strict, local) if local is not None else None
        self.local_index = len(paths)  # what Taken names for the chunks converted here
        self.converted_here = 0
        # Each chunk not yet taken, in order: (worker, None), or (local_index, result) when done here.
        self._pending: deque[tuple[int, Any]] = deque()
        self._load: list[int] = []  # chunks sent to each worker started and not yet taken
        self._sent = 0
        self._taken = 0
        self._handoffs: set[str] = set()  # chunk files a worker may not have read (and removed) yet

    def _start(self) -> int:
        """Fork the next worker. Workers start as chunks come (:meth:`_worker`): forking fifteen
        takes this process 60-100 ms, which the first ones spend converting, and a trace of few
        chunks forks no more than it uses."""
        path = self._paths[len(self._conns)]
        self._procs.append(fork_worker(self._ctx, _serve, (self._strict, path), self._conns, "traceconv-pass1"))
        self._load.append(0)
        return len(self._conns) - 1

    def _worker(self) -> int:
        """The least loaded worker; a new one while some are not started and every one started has work."""
        return next_worker(self._load, len(self._paths), self._start)

    def submit(self, chunk: bytes | Span, unpadded: bool, source: tuple[str, int] | None) -> Iterator[Taken]:
        """Convert one chunk, found at ``source`` (path, offset) or else handed over in a temporary file.

        Yields the results taken meanwhile, in chunk order: those already there, and those
        that had to be taken first to make room.
        """
        yield from self._ready()
        worker = self._worker()
        if self._load[worker] >= IN_FLIGHT and self._local is not None:
            try:
                result = self._local(bytes(chunk), unpadded)  # a Span of the trace: read here
            except Exception as exc:  # as a worker's failure: the trace is converted in one process
                raise Unsuitable(f"{type(exc).__name__}: {exc}") from None
            self._pending.append((self.local_index, result))
            self._sent += 1
            self.converted_here += 1
            return
        while self._load[worker] >= IN_FLIGHT:
            yield self._take()
            worker = self._worker()
        if source is None:
            handoff = temporary_path()
            self._handoffs.add(handoff)
            with open(handoff, APPEND) as fh:
                fh.write(chunk)
            where = (handoff, 0, len(chunk), True)
        else:
            where = (source[0], source[1], len(chunk), False)
        try:
            self._conns[worker].send((self._sent, unpadded, where))
        except OSError as exc:
            raise Unsuitable(f"a worker stopped ({exc})") from None
        self._pending.append((worker, None))
        self._load[worker] += 1
        self._sent += 1

    def drain(self) -> Iterator[Taken]:
        """The results not yet taken; no chunk comes after (the workers end as they finish theirs)."""
        self.stop()
        while self._pending:
            yield self._take()

    def _ready(self) -> Iterator[Taken]:
        """The results at the head of the queue that are there now (none is waited for)."""
        while self._pending:
            worker, result = self._pending[0]
            if result is None and not self._conns[worker].poll():
                return
            yield self._take()

    def _take(self) -> Taken:
        worker, result = self._pending.popleft()
        if result is not None:
            info, parts = result
        else:
            try:
                seq, ok, info, parts = self._conns[worker].recv()
            except (EOFError, OSError) as exc:
                raise Unsuitable(f"a worker stopped ({exc or 'no reply'})") from None
            if not ok:
                raise Unsuitable(info)
            assert seq == self._taken, (seq, self._taken)
            self._load[worker] -= 1
        self._taken += 1
        return worker, info, parts

    def close(self) -> None:
        """Stop the workers once they have written everything (their files are then complete)."""
        self.stop()
        for proc in self._procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join()
        for conn in self._conns:
            conn.close()
        self._conns, self._procs = [], []
        if self._local is not None:
            self._local.out.close_writer()
        for handoff in self._handoffs:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(handoff)

    def __enter__(self) -> ChunkPool:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is not None:  # stop at once: the workers' results are no longer wanted
            for proc in self._procs:
                proc.kill()
        self.close()
