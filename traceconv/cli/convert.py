"""``traceconv ingest`` and ``traceconv nsys``: inputs to Parquet files, one per trace."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from traceconv import process
from traceconv.cli import main
from traceconv.cli.errors import handle_errors, note
from traceconv.cli.progress import Bar
from traceconv.errors import PartialResultError, UsageError
from traceconv.ingest import Job, plan_jobs
from traceconv.readers.base import ignored_option


def _report(job: Job, rows: int, kinds: dict[str, int], span_ns: int | None, elapsed: float) -> None:
    parts = ", ".join(f"{k} {v:,}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]))
    span = f"{span_ns / 1e9:.6f} s" if span_ns is not None else "n/a"
    click.echo(f"{job.source} -> {job.output}")
    click.echo(f"  {rows:,} events in {elapsed:.2f} s; span {span}")
    click.echo(f"  {parts}")


def _run_jobs(jobs: list[Job], fmt: str | None, **options: Any) -> None:
    process.skip_pandas_probe()  # before anything that loads pyarrow
    from traceconv.batch import convert_many, processes_for
    from traceconv.io import WriteResult, convert

    def one_by_one() -> Iterator[tuple[Job, WriteResult, float]]:
        for job in jobs:
            bar = Bar(job.source.name)
            t0 = time.monotonic()
            try:
                result = convert(job.source, job.output, fmt=fmt, progress=bar, **options)
            finally:
                bar.close()
            yield job, result, time.monotonic() - t0

    processes = processes_for(jobs, fmt, options.get("workers"))
    traces = Bar(f"{processes} at a time", unit="traces")  # several small traces: how many are done
    results = convert_many(jobs, fmt, processes, **options) if processes > 1 else one_by_one()
    partial: list[Job] = []
    for done, (job, result, elapsed) in enumerate(results, 1):
        traces.close()
        span = result.end_ns - result.start_ns if result.start_ns is not None and result.end_ns is not None else None
        _report(job, result.rows, result.kinds, span, elapsed)
        info = result.info
        for name in getattr(info, "ignored", []):
            note(f"{job.source}: {ignored_option(name, info.source)}")
        for line in getattr(info, "notes", []):
            click.echo(f"  note: {line}")
        if getattr(info, "partial", False):
            partial.append(job)
            skipped = info.counters
            click.echo(
                f"traceconv: warning: {job.source}: partial result written to {job.output}: skipped "
                f"{skipped.get('events_skipped', 0):,} events and {skipped.get('bytes_skipped', 0):,} bytes "
                f"of damaged input",
                err=True,
            )
        if processes > 1:
            traces(done, len(jobs))
    traces.close()
    if partial:
        sys.exit(PartialResultError.exit_code)


_FORCE = click.option(
    "--force",
    is_flag=True,
    help="Write even where the output does not end in .parquet, or replaces a file traceconv did not write "
    "(an input is never replaced).",
)


@main.command()
@click.argument("traces", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    help="Output file (one input) or directory (several inputs, or a directory of traces).",
)
@click.option(
    "--salvage",
    is_flag=True,
    help="Keep every complete event of a truncated or damaged trace; exit 6 when anything was skipped.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=0),
    default=None,
    help="Processes that parse, link and encode a large trace alongside this one, which works too "
    "while they are busy (default: one per core but one, as many as half the available memory "
    "holds at 64 MiB each; 0: this process only). Several small traces are converted N+1 at a "
    "time (default: one per core).",
)
@_FORCE
@handle_errors
def ingest(traces: tuple[Path, ...], output: Path | None, salvage: bool, workers: int | None, force: bool) -> None:
    """Convert PyTorch profiler traces (.json, .json.gz, or a directory of them) to Parquet.

    Nsight Systems files are recognised by their content and converted too. A directory
    of traces (one per rank, as tensorboard_trace_handler writes) becomes a directory of
    Parquet files, one per trace, readable as one dataset.

    Example:

        traceconv ingest trace.json                    # -> trace.parquet

        traceconv ingest ./log/run1 -o run1_parquet/   # one file per rank

        traceconv ingest --salvage crashed.json.tmp    # keep what a killed run wrote
    """
    options: dict[str, Any] = {"salvage": True} if salvage else {}
    if workers is not None:
        options["workers"] = workers
    _run_jobs(plan_jobs(traces, output, force=force), None, **options)


@main.command()
@click.argument("reports", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Output file or directory.")
@click.option(
    "--nsys",
    "nsys_path",
    type=click.Path(path_type=Path),
    help="The nsys binary to export reports with (default: $NSYS, the PATH, the usual install folders).",
)
@click.option(
    "--include-environment",
    is_flag=True,
    help="Copy the profiled command line and environment into the metadata (credentials redacted).",
)
@_FORCE
@handle_errors
def nsys(
    reports: tuple[Path, ...], output: Path | None, nsys_path: Path | None, include_environment: bool, force: bool
) -> None:
    """Convert Nsight Systems reports (.nsys-rep, .qdrep) or SQLite exports to Parquet.

    Reports are exported to SQLite with `nsys export` into a .traceconv-cache/ folder beside
    them, and the export is reused while it is newer than the report. The profiled
    environment and command line are left out unless --include-environment is given.

    Example:

        traceconv nsys my_trace.nsys-rep               # -> my_trace.parquet

        traceconv nsys run.sqlite -o run.parquet

        traceconv nsys ./reports/ -o parquet/ --nsys /opt/nvidia/nsight-systems/2025.3.1/bin/nsys
    """
    from traceconv.readers import sniff

    jobs = plan_jobs(reports, output, patterns=("*.sqlite", "*.nsys-rep", "*.qdrep"), force=force)
    formats = [sniff(job.source) for job in jobs]
    for job, fmt in zip(jobs, formats, strict=True):
        if fmt not in ("nsys", "nsys-report"):
            raise UsageError(
                job.source,
                "is not an Nsight Systems report or SQLite export by its content",
                "use `traceconv ingest` for PyTorch traces",
            )
    for job, fmt in zip(jobs, formats, strict=True):
        options: dict[str, Any] = {"include_environment": include_environment}
        if fmt == "nsys-report":
            options["nsys"] = nsys_path
        _run_jobs([job], fmt, **options)
