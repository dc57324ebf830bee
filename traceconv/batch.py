"""Many small traces at once: one forked process per core, each converting whole files.

A PyTorch trace too small for worker processes (:meth:`PytorchReader.one_process`) is
converted on one core; a directory of them (one per rank, as ``tensorboard_trace_handler``
writes) would leave the other cores idle. :func:`convert_many` gives each trace to a process
of a pool instead. Results come back in the order of the inputs; the first error stops the
rest, and the conversions still running are stopped as on Ctrl-C (they leave nothing behind).
Each file is converted exactly as one at a time would convert it.
"""

from __future__ import annotations

import pickle
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from traceconv.ingest import Job
from traceconv.writing import WriteResult, convert


def processes_for(jobs: Sequence[Job], fmt: str | None, workers: int | None = None) -> int:
    """How many processes convert ``jobs`` at once: as many as convert one large trace (the
    workers of :func:`worker_count` and this process) when there are several jobs and every one
    is a PyTorch trace small enough to be converted in one process; else 1."""
    if len(jobs) < 2:
        return 1
    from traceconv.errors import TraceconvError
    from traceconv.readers import sniff
    from traceconv.readers.pytorch.reader import PytorchReader
    from traceconv.readers.pytorch.workers import worker_count

    processes = min(len(jobs), worker_count(workers) + 1)
    if processes < 2:
        return 1

    for job in jobs:
        try:
            if (fmt or sniff(job.source)) != "pytorch" or not PytorchReader(job.source).one_process():
                return 1
        except (TraceconvError, OSError):  # reported where one at a time meets it, after the files before it
            return 1
    return processes


_HELD = {signal.SIGINT, signal.SIGTERM}


def _serve(conn: Any, jobs: Sequence[Job], fmt: str | None, options: dict[str, Any]) -> None:
    """A process of the batch: convert its share of the jobs, in order, and send each result
    (or the error that stops it) back. Ctrl-C is the batch's to handle, SIGTERM ends this one."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _HELD)
    for job in jobs:
        started = time.monotonic()
        try:
            result = convert(job.source, job.output, fmt=fmt, partitioned=job.partitioned, **options)
        except Exception as exc:  # the main process raises it, in the order of the inputs
            conn.send(("error", _portable(exc)))
            return
        conn.send(("done", result, time.monotonic() - started))


def _portable(exc: Exception) -> Exception:
    """``exc`` if it survives pickling, else a RuntimeError that says what it was."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc


def convert_many(
    jobs: Sequence[Job], fmt: str | None, processes: int, **options: Any
) -> Iterator[tuple[Job, WriteResult, float]]:
    """Convert every job with ``processes`` forked processes: (job, result, seconds), in order.

    Job ``k`` goes to process ``k % processes`` (the inputs of a batch are alike), which sends
    its results through a pipe of its own; they are taken in the order of the inputs.
    """
    import multiprocessing

    options = {**options, "workers": 0}  # one process per file: the batch is the parallelism
    ctx = multiprocessing.get_context("fork")
    conns, procs = [], []
    # Ctrl-C reaches every process of the terminal's group: the batch's processes ignore it, and
    # this process stops them with SIGTERM, which unwinds a conversion quietly (its temporary files
    # go) where an interrupt would not. Both signals are blocked while the processes are forked
    # (held, not lost: one that arrives meanwhile reaches this process when they are unblocked);
    # each process sets its own handling before it unblocks them (_serve).
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD) if main_thread else None
    try:
        for i in range(processes):
            parent, child = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_serve, args=(child, jobs[i::processes], fmt, options), daemon=True)
            proc.start()
            child.close()
            conns.append(parent)
            procs.append(proc)
    finally:
        if previous is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    finished = False
    try:
        for k, job in enumerate(jobs):
            try:
                message = conns[k % processes].recv()
            except EOFError:
                raise RuntimeError(f"the process converting {job.source} ended without a result") from None
            if message[0] == "error":
                raise message[1]
            yield job, message[1], message[2]
        finished = True
    finally:  # an error, Ctrl-C, SIGTERM: whatever still runs stops and cleans up
        for proc in procs:
            if not finished and proc.is_alive():
                proc.terminate()
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
                proc.join()
        for conn in conns:
            conn.close()
