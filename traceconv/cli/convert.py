"""``traceconv ingest`` and ``traceconv nsys``: inputs to Parquet files, one per trace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from traceconv.cli import main
from traceconv.cli.errors import handle_errors
from traceconv.cli.runs import run_tasks
from traceconv.errors import UsageError
from traceconv.fleet import ENV
from traceconv.fleet.run import Task
from traceconv.ingest import plan_jobs

_FORCE = click.option(
    "--force",
    is_flag=True,
    help="Write even where the output does not end in .parquet, or replaces a file traceconv did not write "
    "(an input is never replaced); converts again the parts of a dataset that are up to date.",
)
_SCHEDULER = click.option(
    "--scheduler",
    envvar=ENV,
    metavar="ADDRESS",
    help=f"Convert on a Dask cluster, one task per trace (tcp://HOST:PORT, or local:N to start N worker "
    f"processes here; default: ${ENV}). Inputs and output on a filesystem every worker sees. A directory "
    "of traces becomes a partitioned dataset. Needs traceconv[dask].",
)
_PARTITIONED = click.option(
    "--partitioned",
    is_flag=True,
    help="Write a directory of traces as a hive-partitioned dataset, OUT/rank=R/<trace>.parquet with "
    "_common_metadata, as --scheduler does; parts that are up to date are skipped.",
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
@_SCHEDULER
@_PARTITIONED
@handle_errors
def ingest(
    traces: tuple[Path, ...],
    output: Path | None,
    salvage: bool,
    workers: int | None,
    force: bool,
    scheduler: str | None,
    partitioned: bool,
) -> None:
    """Convert PyTorch profiler traces (.json, .json.gz, or a directory of them) to Parquet.

    Nsight Systems files are recognised by their content and converted too. A directory
    of traces (one per rank, as tensorboard_trace_handler writes) becomes a directory of
    Parquet files, one per trace, readable as one dataset.

    Example:

        traceconv ingest trace.json                    # -> trace.parquet

        traceconv ingest ./log/run1 -o run1_parquet/   # one file per rank

        traceconv ingest --salvage crashed.json.tmp    # keep what a killed run wrote

        traceconv ingest ./log/ -o run.parquet/ --scheduler tcp://10.0.0.5:8786
    """
    options: dict[str, Any] = {"salvage": True} if salvage else {}
    if workers is not None:
        options["workers"] = workers
    jobs = plan_jobs(traces, output, force=force, partitioned=partitioned or bool(scheduler))
    run_tasks([Task(job, None, options) for job in jobs], scheduler or None, force)


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
@_SCHEDULER
@_PARTITIONED
@handle_errors
def nsys(
    reports: tuple[Path, ...],
    output: Path | None,
    nsys_path: Path | None,
    include_environment: bool,
    force: bool,
    scheduler: str | None,
    partitioned: bool,
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

    patterns = ("*.sqlite", "*.nsys-rep", "*.qdrep")
    jobs = plan_jobs(reports, output, patterns=patterns, force=force, partitioned=partitioned or bool(scheduler))
    formats = [sniff(job.source) for job in jobs]
    for job, fmt in zip(jobs, formats, strict=True):
        if fmt not in ("nsys", "nsys-report"):
            raise UsageError(
                job.source,
                "is not an Nsight Systems report or SQLite export by its content",
                "use `traceconv ingest` for PyTorch traces",
            )
    tasks = []
    for job, fmt in zip(jobs, formats, strict=True):
        options: dict[str, Any] = {"include_environment": include_environment}
        if fmt == "nsys-report":
            options["nsys"] = nsys_path
        tasks.append(Task(job, fmt, options))
    run_tasks(tasks, scheduler or None, force)
