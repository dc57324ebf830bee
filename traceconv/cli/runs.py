"""Running the conversions of ``ingest`` and ``nsys``: here, several at once, or on a Dask cluster.

The outputs are the same either way. Parts of a partitioned dataset that are complete and newer
than their input are skipped (unless ``--force``); the dataset's ``_common_metadata`` is written
once every part is done (:mod:`traceconv.dataset`).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import click

from traceconv import dataset, process
from traceconv.cli.errors import note
from traceconv.cli.progress import Bar
from traceconv.errors import PartialResultError
from traceconv.fleet.run import Task
from traceconv.ingest import Job
from traceconv.readers.base import ignored_option

if TYPE_CHECKING:  # pyarrow is loaded only once the process is set up (run_tasks)
    from traceconv.writing import WriteResult

Done = tuple[Job, "WriteResult", float]


def run_tasks(tasks: Sequence[Task], scheduler: str | None = None, force: bool = False) -> None:
    """Convert every task and report each; exit 6 when a result is partial (``--salvage``)."""
    process.skip_pandas_probe()  # before anything that loads pyarrow
    todo = [t for t in tasks if force or not _skip(t.job)]
    roots = sorted({t.job.output.parent for t in tasks if t.job.partitioned})
    for root in sorted({t.job.output.parent for t in todo if t.job.partitioned}):
        dataset.begin(root)
    partial = _report_all(_results(todo, scheduler), len(todo), scheduler)
    for root in roots:
        names = [t.job.output.name for t in tasks if t.job.partitioned and t.job.output.parent == root]
        dataset.finish(root, names)
    if partial:
        sys.exit(PartialResultError.exit_code)


def _skip(job: Job) -> bool:
    from traceconv.io import up_to_date

    if not job.partitioned or not up_to_date(job.source, job.output):
        return False
    click.echo(f"{job.source} -> {dataset.existing_part(job.output)}: up to date, skipped (--force converts it)")
    return True


def _results(tasks: Sequence[Task], scheduler: str | None) -> Iterator[Done]:
    if not tasks:
        return
    if scheduler is not None:
        from traceconv.fleet.cluster import client
        from traceconv.fleet.run import convert_on_cluster

        if any("workers" in t.options for t in tasks):
            note("--workers is not used with --scheduler: each task converts its trace in one worker process")
        with client(scheduler) as dask_client:
            for task, result, elapsed in convert_on_cluster(dask_client, tasks):
                yield task.job, result, elapsed
        return
    from traceconv.batch import convert_many, processes_for

    alike = len({(t.fmt, tuple(sorted(t.options.items()))) for t in tasks}) == 1
    jobs = [t.job for t in tasks]
    processes = processes_for(jobs, tasks[0].fmt, tasks[0].options.get("workers")) if alike else 1
    if processes > 1:
        yield from convert_many(jobs, tasks[0].fmt, processes, **tasks[0].options)
    else:
        yield from _one_by_one(tasks)


def _one_by_one(tasks: Sequence[Task]) -> Iterator[Done]:
    from traceconv.writing import convert

    for task in tasks:
        job = task.job
        bar = Bar(job.source.name)
        t0 = time.monotonic()
        try:
            result = convert(
                job.source, job.output, fmt=task.fmt, progress=bar, partitioned=job.partitioned, **task.options
            )
        finally:
            bar.close()
        yield job, result, time.monotonic() - t0


def _report_all(results: Iterator[Done], total: int, scheduler: str | None) -> list[Job]:
    """Report each result as it comes; the jobs whose result is partial."""
    traces = Bar(f"on {scheduler}" if scheduler else "traces", unit="traces")
    partial: list[Job] = []
    for done, (job, result, elapsed) in enumerate(results, 1):
        traces.close()
        _report(job, result, elapsed)
        if getattr(result.info, "partial", False):
            partial.append(job)
        if total > 1:
            traces(done, total)
    traces.close()
    return partial


def _report(job: Job, result: WriteResult, elapsed: float) -> None:
    parts = ", ".join(f"{k} {v:,}" for k, v in sorted(result.kinds.items(), key=lambda kv: -kv[1]))
    span_ns = result.end_ns - result.start_ns if result.start_ns is not None and result.end_ns is not None else None
    span = f"{span_ns / 1e9:.6f} s" if span_ns is not None else "n/a"
    click.echo(f"{job.source} -> {result.path if job.partitioned else job.output}")
    click.echo(f"  {result.rows:,} events in {elapsed:.2f} s; span {span}")
    click.echo(f"  {parts}")
    info = result.info
    for name in getattr(info, "ignored", []):
        note(f"{job.source}: {ignored_option(name, info.source)}")
    for line in getattr(info, "notes", []):
        click.echo(f"  note: {line}")
    if getattr(info, "partial", False):
        skipped = info.counters
        click.echo(
            f"traceconv: warning: {job.source}: partial result written to {result.path}: skipped "
            f"{skipped.get('events_skipped', 0):,} events and {skipped.get('bytes_skipped', 0):,} bytes "
            f"of damaged input",
            err=True,
        )
