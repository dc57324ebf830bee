"""The command line: thin click commands over the public API. Only this module prints."""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from traceconv import __version__
from traceconv.errors import TraceconvError, UsageError
from traceconv.ingest import Job, plan_jobs

F = TypeVar("F", bound=Callable[..., Any])


def _fail(exc: TraceconvError) -> None:
    click.echo(f"traceconv: error: {exc.message}", err=True)
    sys.exit(exc.exit_code)


def handle_errors(func: F) -> F:
    """Turn the library's errors into one line on stderr and the class's exit code."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        debug = click.get_current_context().find_root().params.get("debug", False)
        try:
            return func(*args, **kwargs)
        except TraceconvError as exc:
            if debug:
                raise
            _fail(exc)
        except KeyboardInterrupt:
            click.echo("traceconv: interrupted; no output was left half-written", err=True)
            sys.exit(130)
        except MemoryError:
            click.echo("traceconv: error: out of memory; please report this with the input's size", err=True)
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


class _Bar:
    """Bytes-read progress on stderr, only when stderr is a terminal and the input is large."""

    MIN_BYTES = 4 << 20

    def __init__(self, label: str) -> None:
        self.label = label
        self.last = 0.0
        self.enabled = sys.stderr.isatty()

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or total < self.MIN_BYTES:
            return
        now = time.monotonic()
        if now - self.last < 0.1 and done < total:
            return
        self.last = now
        pct = min(100.0, 100.0 * done / max(total, 1))
        filled = int(pct / 100 * 30)
        sys.stderr.write(f"\r{self.label} [{'#' * filled}{'.' * (30 - filled)}] {pct:5.1f}% "
                         f"{done / 2**20:,.0f}/{total / 2**20:,.0f} MiB")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled and self.last:
            sys.stderr.write("\r" + " " * 100 + "\r")
            sys.stderr.flush()


def _report(job: Job, rows: int, kinds: dict[str, int], span_ns: int | None, elapsed: float) -> None:
    parts = ", ".join(f"{k} {v:,}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]))
    span = f"{span_ns / 1e9:.6f} s" if span_ns is not None else "n/a"
    click.echo(f"{job.source} -> {job.output}")
    click.echo(f"  {rows:,} events in {elapsed:.2f} s; span {span}")
    click.echo(f"  {parts}")


def _run_jobs(jobs: list[Job], fmt: str | None) -> None:
    from traceconv.io import convert

    for job in jobs:
        bar = _Bar(job.source.name)
        t0 = time.monotonic()
        try:
            result = convert(job.source, job.output, fmt=fmt, progress=bar)
        finally:
            bar.close()
        span = result.end_ns - result.start_ns if result.start_ns is not None and result.end_ns is not None else None
        _report(job, result.rows, result.kinds, span, time.monotonic() - t0)
        info = result.info
        for note in getattr(info, "notes", []):
            click.echo(f"  note: {note}")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="traceconv")
@click.option("--debug", is_flag=True, help="Show the full traceback on errors.")
def main(debug: bool) -> None:
    """Convert GPU profiles (PyTorch profiler, Nsight Systems) to one Parquet schema and analyse them."""


@main.command()
@click.argument("traces", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(path_type=Path),
              help="Output file (one input) or directory (several inputs, or a directory of traces).")
@handle_errors
def ingest(traces: tuple[Path, ...], output: Path | None) -> None:
    """Convert PyTorch profiler traces (.json, .json.gz, or a directory of them) to Parquet.

    Nsight Systems files are recognised by their content and converted too. A directory
    of traces (one per rank, as tensorboard_trace_handler writes) becomes a directory of
    Parquet files, one per trace, readable as one dataset.

    Example:

        traceconv ingest trace.json                    # -> trace.parquet

        traceconv ingest ./log/run1 -o run1_parquet/   # one file per rank
    """
    _run_jobs(plan_jobs(traces, output), None)


@main.command()
@click.argument("reports", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Output file or directory.")
@click.option("--nsys", "nsys_path", type=click.Path(path_type=Path), help="The nsys binary to export reports with.")
@handle_errors
def nsys(reports: tuple[Path, ...], output: Path | None, nsys_path: Path | None) -> None:
    """Convert Nsight Systems reports (.nsys-rep, .qdrep) or SQLite exports to Parquet.

    Example:

        traceconv nsys my_trace.nsys-rep               # -> my_trace.parquet

        traceconv nsys run.sqlite -o run.parquet
    """
    jobs = plan_jobs(reports, output, patterns=("*.sqlite", "*.nsys-rep", "*.qdrep"))
    for job in jobs:
        if job.source.suffix not in (".sqlite", ".nsys-rep", ".qdrep", ".db"):
            raise UsageError(job.source, "is not an Nsight Systems file by its extension",
                             "use `traceconv ingest` for PyTorch traces")
    if nsys_path is not None:
        import os

        os.environ["NSYS"] = str(nsys_path)
    _run_jobs(jobs, None)


if __name__ == "__main__":
    main()
