"""Conversions as Dask tasks: one per trace, results reported as they complete.

A task converts one input where it lies and writes its output itself, under a temporary name
renamed when complete (as a local run does), so a task that fails or whose worker dies leaves
no output file. Dask gives the tasks of a worker that died to the others; a task whose workers
died too often (``distributed.scheduler.allowed-failures``) stops the run with an error, as does
the first conversion that fails. The paths are made absolute here: a worker's working folder is
not this process's.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traceconv.errors import TraceconvError
from traceconv.ingest import Job

if TYPE_CHECKING:
    from traceconv.writing import WriteResult


@dataclass(frozen=True)
class Task:
    """One conversion: the job, its format (None: by content) and the reader's options."""

    job: Job
    fmt: str | None = None
    options: dict[str, Any] = field(default_factory=dict)


def convert_task(source: str, output: str, fmt: str | None, partitioned: bool, options: dict[str, Any]) -> Any:
    """What a worker runs: (WriteResult, seconds). One process per task: a worker's process may
    not fork the PyTorch reader's parsing processes (Dask's are daemons), so it parses alone."""
    from traceconv import process
    from traceconv.readers import sniff
    from traceconv.writing import convert

    process.skip_pandas_probe()
    if (fmt or sniff(Path(source))) == "pytorch":
        options = {**options, "workers": 0}
    started = time.monotonic()
    result = convert(Path(source), Path(output), fmt=fmt, partitioned=partitioned, **options)
    return result, time.monotonic() - started


def _submit(client: Any, tasks: Sequence[Task]) -> list[Any]:
    run = uuid.uuid4().hex[:8]
    futures = []
    for i, task in enumerate(tasks):
        source, output = os.path.abspath(task.job.source), os.path.abspath(task.job.output)
        key = f"traceconv-{Path(source).name}-{run}-{i}"
        args = (source, output, task.fmt, task.job.partitioned, task.options)
        futures.append(client.submit(convert_task, *args, key=key, pure=False, retries=0))
    return futures


def _failure(task: Task, future: Any) -> BaseException:
    """The error a task ended with, as the CLI reports it (a TraceconvError keeps its class)."""
    exc = future.exception()
    if isinstance(exc, TraceconvError):
        return exc
    name = type(exc).__name__
    if name == "KilledWorker":
        return TraceconvError(
            task.job.source,
            "the Dask workers converting it died too often (distributed.scheduler.allowed-failures); "
            "no output was written for it",
            "look at the workers' logs (memory limit?), then run the command again: complete outputs are kept",
        )
    return TraceconvError(
        task.job.source,
        f"the Dask task converting it failed ({name}: {exc})",
        "look at the workers' logs, then run the command again: complete outputs are kept",
    )


def convert_on_cluster(client: Any, tasks: Sequence[Task]) -> Iterator[tuple[Task, WriteResult, float]]:
    """Every task on the cluster: (task, result, seconds) in the order they complete.

    The first failure cancels the tasks not yet started and is raised; tasks already running
    finish their outputs (complete ones: a re-run skips them).
    """
    from distributed import as_completed

    futures = _submit(client, tasks)
    by_key = {future.key: task for future, task in zip(futures, tasks, strict=True)}
    try:
        for future in as_completed(futures, loop=client.loop):  # type: ignore[no-untyped-call]
            task = by_key[future.key]
            if future.status != "finished":
                raise _failure(task, future)
            result, elapsed = future.result()
            yield task, result, elapsed
    finally:
        client.cancel([f for f in futures if not f.done()])
