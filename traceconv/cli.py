"""The command line: thin click commands over the public API. Only this module prints."""

from __future__ import annotations

import functools
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import click

from traceconv import __version__
from traceconv.errors import PartialResultError, TraceconvError, UsageError
from traceconv.ingest import Job, plan_jobs
from traceconv.lean import no_blas_threads, system_allocator

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
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as exc:  # a bug of ours: still one line, and the way to the traceback
            if debug:
                raise
            click.echo(
                f"traceconv: internal error: {type(exc).__name__}: {exc}; rerun with --debug and report the traceback",
                err=True,
            )
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


class _Bar:
    """Bytes-read progress on stderr, only when stderr is a terminal and the input is large."""

    MIN_BYTES = 4 << 20

    def __init__(self, label: str, unit: str = "MiB") -> None:
        self.label = label
        self.unit = unit  # "MiB": bytes of one input; else a count (of traces)
        self.last = 0.0
        self.enabled = sys.stderr.isatty()

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or (self.unit == "MiB" and total < self.MIN_BYTES):
            return
        now = time.monotonic()
        if now - self.last < 0.1 and done < total:
            return
        self.last = now
        pct = min(100.0, 100.0 * done / max(total, 1))
        filled = int(pct / 100 * 30)
        if self.unit == "MiB":
            amount = f"{done / 2**20:,.0f}/{total / 2**20:,.0f} MiB"
        else:
            amount = f"{done}/{total} {self.unit}"
        sys.stderr.write(f"\r{self.label} [{'#' * filled}{'.' * (30 - filled)}] {pct:5.1f}% {amount}")
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


def _run_jobs(jobs: list[Job], fmt: str | None, **options: Any) -> None:
    from traceconv.lean import skip_pandas_probe

    skip_pandas_probe()  # before anything that loads pyarrow
    from traceconv.batch import convert_many, processes_for
    from traceconv.io import WriteResult, convert

    def one_by_one() -> Iterator[tuple[Job, WriteResult, float]]:
        for job in jobs:
            bar = _Bar(job.source.name)
            t0 = time.monotonic()
            try:
                result = convert(job.source, job.output, fmt=fmt, progress=bar, **options)
            finally:
                bar.close()
            yield job, result, time.monotonic() - t0

    processes = processes_for(jobs, fmt, options.get("workers"))
    traces = _Bar(f"{processes} at a time", unit="traces")  # several small traces: how many are done
    results = convert_many(jobs, fmt, processes, **options) if processes > 1 else one_by_one()
    partial: list[Job] = []
    for done, (job, result, elapsed) in enumerate(results, 1):
        traces.close()
        span = result.end_ns - result.start_ns if result.start_ns is not None and result.end_ns is not None else None
        _report(job, result.rows, result.kinds, span, elapsed)
        info = result.info
        for note in getattr(info, "notes", []):
            click.echo(f"  note: {note}")
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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="traceconv")
@click.option("--debug", is_flag=True, help="Show the full traceback on errors.")
def main(debug: bool) -> None:
    """Convert GPU profiles (PyTorch profiler, Nsight Systems) to one Parquet schema and analyse them."""
    # SIGTERM (kill, timeout, a job scheduler) unwinds like Ctrl-C: temporary files and
    # half-written outputs are removed on the way out; exit status 143 as the shell reports it.
    signal.signal(signal.SIGTERM, _terminated)
    system_allocator()
    no_blas_threads()


def _terminated(signum: int, frame: object) -> None:
    signal.signal(signum, signal.SIG_IGN)  # once: a second SIGTERM must not cut the cleanup short
    raise SystemExit(128 + signum)


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
    help="Processes that parse a large trace alongside this one, which parses too while they are "
    "busy (default: one per core but one, up to 4; 0: parse in this process only). Several small "
    "traces are converted N+1 at a time (default: one per core).",
)
@handle_errors
def ingest(traces: tuple[Path, ...], output: Path | None, salvage: bool, workers: int | None) -> None:
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
    _run_jobs(plan_jobs(traces, output), None, **options)


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
@handle_errors
def nsys(reports: tuple[Path, ...], output: Path | None, nsys_path: Path | None, include_environment: bool) -> None:
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

    jobs = plan_jobs(reports, output, patterns=("*.sqlite", "*.nsys-rep", "*.qdrep"))
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


@main.command()
@click.argument("trace", type=click.Path(path_type=Path))
@click.option(
    "--by",
    type=click.Choice(["name", "launch"]),
    default="name",
    show_default=True,
    help="Group by kernel name, or by the API call that launched it.",
)
@click.option(
    "--top",
    type=click.IntRange(min=0),
    default=None,
    help="Keep the N with the longest execution time, longest first; 0 keeps all. "
    "Default: 20 in a table, all in CSV and JSON.",
)
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@click.option(
    "--per-launch", is_flag=True, help="One row per kernel (like nsys cuda_kern_exec_trace), in launch order."
)
@click.option(
    "--kind",
    "kinds",
    type=click.Choice(["kernel", "memcpy", "memset"]),
    multiple=True,
    help="GPU work to include (repeatable).  [default: kernel]",
)
@handle_errors
def kernels(trace: Path, by: str, top: int | None, fmt: str, per_launch: bool, kinds: tuple[str, ...]) -> None:
    """Launch, queue, execution and wall time of every kernel, summed per kernel name.

    TRACE is a PyTorch trace, an Nsight Systems report or export, or a traceconv Parquet
    file. Times follow `nsys stats`: API = the launch call's duration; queue = from the
    call's return to the kernel's start (empty when the kernel started first); execution
    = the kernel's duration; wall = from the call's start to whichever ends last. Kernels
    with no launching call in the trace are kept and counted. Tables show ms and µs; CSV
    and JSON give nanoseconds.

    Example:

        traceconv kernels run.nsys-rep --top 10

        traceconv kernels trace.json --by launch --format csv > kernels.csv

        traceconv kernels trace.parquet --per-launch --top 50
    """
    from traceconv import tables as R
    from traceconv.analyses import kernels as K
    from traceconv.analyses.common import load

    kinds = kinds or K.DEFAULT_KINDS
    table = load(trace, columns=K.INPUT_COLUMNS, kinds=K.input_kinds(kinds))
    rows = K.per_launch(table, kinds)
    limit = top if top is not None else (20 if fmt == "table" else 0)
    what = "/".join(kinds)
    if per_launch:
        figures = K.launch_totals(rows)
        shown = K.longest(rows, limit) if limit else rows
    else:
        keys = K.GROUPINGS[by]
        result = K.summary(rows, by)
        figures = K.totals(result)
        shown = result.head(limit) if limit else result
    if fmt == "csv":
        click.echo(R.csv_text(shown), nl=False)
        if figures["no_launch"]:
            click.echo(
                f"traceconv: note: {figures['no_launch']:,} of {figures['rows']:,} {what} rows "
                f"{_have(figures['no_launch'])} no launching call in the trace; kept, with empty API, queue "
                "and wall times",
                err=True,
            )
        return
    if fmt == "json":
        click.echo(
            R.json_text(
                shown,
                {
                    "input": str(trace),
                    "kinds": list(kinds),
                    "by": None if per_launch else by,
                    "totals": figures,
                    "shown": len(shown),
                },
            )
        )
        return
    if not figures["rows"]:
        click.echo(f"{trace}: no {what} rows; was GPU activity traced (ProfilerActivity.CUDA, nsys -t cuda)?")
        return
    width = shutil.get_terminal_size((200, 24)).columns
    if per_launch:
        relative, origin = R.from_first_start(shown)
        click.echo(R.text_table(relative, R.PER_LAUNCH_COLS, width))
        if origin is not None:
            click.echo(f"Start times in ms from {origin} ns.")
    else:
        cols = [c for c in R.kernel_summary_cols(keys) if c.source != "no_launch" or figures["no_launch"]]
        click.echo(R.text_table(shown, cols, width))
    click.echo(_kernels_footer(figures, len(shown), what, None if per_launch else by))


def _have(n: int) -> str:
    return "has" if n == 1 else "have"


def _kernels_footer(figures: dict[str, Any], shown: int, what: str, by: str | None) -> str:
    unit = {None: f"{what} rows", "name": "names", "launch": "launch APIs"}[by]
    total = figures["rows"] if by is None else figures["groups"]
    head = f"{figures['rows']:,} {what} rows, {figures['exec_total_ns'] / 1e6:,.3f} ms of execution"
    lines = [head if by is None else f"{head}, {total:,} {unit}"]
    if shown < total:
        order = "launch order" if by is None else "that order"
        lines.append(f"Showing the {shown:,} longest of {total:,} {unit}; --top 0 shows all in {order}.")
    if figures["no_launch"]:
        n = figures["no_launch"]
        lines.append(
            f"{n:,} {'row' if n == 1 else 'rows'} {_have(n)} no launching call in the trace: kept and "
            "counted in execution time, with empty API, queue and wall times."
        )
    if by is not None:
        lines.append("Min, and the spread of queue, API and wall times: --format csv or json.")
    return "\n".join(lines)


def _thresholds(values: tuple[str, ...]) -> Any:
    """``--threshold NAME=VALUE`` options as a Thresholds object."""
    from traceconv.analyses.findings import Thresholds

    overrides = {}
    for item in values:
        name, sep, value = item.partition("=")
        try:
            overrides[name.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            raise UsageError(None, f"--threshold {item!r} is not NAME=NUMBER", "e.g. --threshold HOST_DEVICE_COPIES=5")
    return Thresholds().with_overrides(overrides)


_ANALYSIS_OPTIONS = [
    click.option(
        "--format", "fmt", type=click.Choice(["table", "json", "markdown"]), default="table", show_default=True
    ),
    click.option(
        "--top",
        type=click.IntRange(min=0),
        default=8,
        show_default=True,
        help="Rows per list (operators, kernels, ranges); 0 keeps all.",
    ),
    click.option(
        "--threshold",
        "thresholds",
        multiple=True,
        metavar="NAME=VALUE",
        help="Override a finding threshold (repeatable), e.g. HOST_DEVICE_COPIES=5; see the README.",
    ),
    click.option(
        "--steps",
        "step_pattern",
        metavar="REGEX",
        default=None,
        help="Regular expression for the names of step ranges.  [default: ProfilerStep#N, step_N, iterN]",
    ),
]


def _analysis_options(func: F) -> F:
    for option in reversed(_ANALYSIS_OPTIONS):
        func = option(func)
    return func


def _table_width() -> int:
    return min(shutil.get_terminal_size((100, 24)).columns, 160)


@main.command()
@click.argument("trace", type=click.Path(path_type=Path))
@_analysis_options
@handle_errors
def summary(trace: Path, fmt: str, top: int, thresholds: tuple[str, ...], step_pattern: str | None) -> None:
    """Where the time goes and what is wasteful: operators, kernels, copies, syncs, findings.

    TRACE is a PyTorch trace, an Nsight Systems report or export, or a traceconv Parquet
    file. Findings (HOST_DEVICE_COPIES, SYNC_STALLS, PAGEABLE_COPIES, GPU_IDLE, QUEUE_WAIT,
    LOW_OCCUPANCY, TINY_KERNELS) are measured on the steps when the trace marks them (ProfilerStep#N,
    NVTX step_N), else on the whole window. JSON gives nanoseconds and bytes.

    Example:

        traceconv summary train.pt.trace.json.gz

        traceconv summary run.nsys-rep --format json --threshold GPU_IDLE=50
    """
    from traceconv import render
    from traceconv.analyses import prepare as P
    from traceconv.analyses import summary as SM
    from traceconv.analyses.common import load

    limits = _thresholds(thresholds)
    table = load(trace, columns=P.INPUT_COLUMNS)
    result = SM.summarize(table, limits, top, step_pattern or P.STEP_PATTERN)
    click.echo(render.summary_text(SM.as_dict(result, top), fmt, trace.name, _table_width()), nl=False)


@main.command()
@click.argument("before", type=click.Path(path_type=Path))
@click.argument("after", type=click.Path(path_type=Path))
@_analysis_options
@handle_errors
def diff(before: Path, after: Path, fmt: str, top: int, thresholds: tuple[str, ...], step_pattern: str | None) -> None:
    """Compare two runs: step time, GPU time, operators, kernels, copies, syncs and findings.

    Both are lined up per step when both mark steps (ProfilerStep#N, NVTX step_N), else
    per profiled window. Operators and kernels that appeared or disappeared are marked.
    JSON holds `before`, `after` (per step, keys as in `summary`) and `delta`.

    Example:

        traceconv diff before.pt.trace.json.gz after.pt.trace.json.gz

        traceconv diff buggy.sqlite fixed.sqlite --format markdown > diff.md
    """
    from traceconv import render
    from traceconv.analyses import diff as D
    from traceconv.analyses import prepare as P
    from traceconv.analyses.common import load

    limits = _thresholds(thresholds)
    tables = [load(path, columns=P.INPUT_COLUMNS) for path in (before, after)]
    result = D.diff(tables[0], tables[1], limits, step_pattern or P.STEP_PATTERN)
    click.echo(render.diff_text(D.as_dict(result, top), fmt, before.name, after.name, _table_width()), nl=False)


if __name__ == "__main__":
    main()
