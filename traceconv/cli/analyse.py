"""``traceconv kernels``, ``summary`` and ``diff``: a trace, report or Parquet file in, text out."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from traceconv import process
from traceconv.cli import main
from traceconv.cli.errors import handle_errors, note
from traceconv.cli.progress import Bar
from traceconv.cli.width import prose_width, terminal_width

if TYPE_CHECKING:
    from traceconv.analyses.source import Source

F = TypeVar("F", bound=Callable[..., Any])
PEAK_OPTION = click.option(
    "--peak",
    "peaks",
    multiple=True,
    metavar="NAME=VALUE",
    help="A peak of the GPU (repeatable), over traceconv's table: fp64, fp64_tensor, fp32, tf32, bf16, fp16, fp8 "
    'in dense TFLOP/s, bandwidth in GB/s; or gpu="H100 SXM" for a GPU the profile does not name.',
)


@main.command()
@click.argument("trace", type=click.Path(path_type=Path))
@click.option(
    "--by",
    type=click.Choice(["name", "launch", "op"]),
    default="name",
    show_default=True,
    help="Group by kernel name, by the API call that launched it, or by the operator (NVTX range) it came from.",
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
@PEAK_OPTION
@click.option(
    "--kind",
    "kinds",
    type=click.Choice(["kernel", "graph", "memcpy", "memset"]),
    multiple=True,
    help="GPU work to include (repeatable): graph = CUDA graphs traced whole by Nsight Systems, one row an "
    "execution.  [default: kernel, and graph where the input has graphs]",
)
@handle_errors
def kernels(
    trace: Path, by: str, top: int | None, fmt: str, per_launch: bool, kinds: tuple[str, ...], peaks: tuple[str, ...]
) -> None:
    """Launch, queue, execution and wall time of every kernel, summed per kernel name.

    TRACE is a PyTorch trace, an Nsight Systems report or export, or a traceconv Parquet
    file. Times follow `nsys stats`: API = the launch call's duration; queue = from the
    call's return to the kernel's start (empty when the kernel started first); execution
    = the kernel's duration; wall = from the call's start to whichever ends last. Kernels
    with no launching call in the trace are kept and counted. Per kernel name, the engine
    of matrix kernels (tensor or CUDA cores, by the name) and, where the operators' shapes
    are recorded, the TFLOP/s of their work and its place on the GPU's roofline. Tables
    show ms and µs; CSV and JSON give nanoseconds.

    Example:

        traceconv kernels run.nsys-rep --top 10

        traceconv kernels trace.json --by launch --format csv > kernels.csv

        traceconv kernels trace.parquet --per-launch --top 50
    """
    from traceconv.analyses import kernels as K
    from traceconv.analyses import roofline as RF
    from traceconv.render.kernels import kernels_text

    limit = top if top is not None else (20 if fmt == "table" else 0)
    overrides = RF.parse(peaks)
    with opened([trace]) as source:
        result = K.report(source, kinds or K.default_kinds(source), None if per_launch else by, limit)
        if result.keys == ("name",):
            result = K.with_roofline(result, RF.kernel_roofs(source, overrides))
    text, remark = kernels_text(result, fmt, trace, terminal_width(200))
    click.echo(text, nl=False)
    if remark:
        note(remark)


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
        help="Override a finding threshold (repeatable), e.g. HOST_DEVICE_COPIES=5; see docs/findings.md.",
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


CODES_MARK = "FINDING_CODES"


class _WithFindingCodes(click.Command):
    """A command whose help lists every finding code where it says FINDING_CODES, from the one list
    that defines them (``findings.CODES``), read only when the help is shown: the findings module
    imports the analyses, which the command line loads when a command runs."""

    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from traceconv.analyses.summary.findings import CODES

        written = self.help
        self.help = (written or "").replace(CODES_MARK, ", ".join(CODES))
        try:
            super().format_help_text(ctx, formatter)
        finally:
            self.help = written


@main.command(cls=_WithFindingCodes)
@click.argument("trace", type=click.Path(path_type=Path))
@_analysis_options
@click.option(
    "--sort",
    default="gpu_self",
    show_default=True,
    metavar="COLUMN",
    help="Operator order: gpu_self, gpu_total, cpu_self, cpu_total, calls, or key_averages()'s names "
    "(self_cuda_time_total, cuda_time_total, self_cpu_time_total, cpu_time_total, count).",
)
@PEAK_OPTION
@handle_errors
def summary(
    trace: Path,
    fmt: str,
    top: int,
    thresholds: tuple[str, ...],
    step_pattern: str | None,
    sort: str,
    peaks: tuple[str, ...],
) -> None:
    """Where the time goes, what is wasteful, and what fixing it would win a step.

    TRACE is a PyTorch trace, an Nsight Systems report or export, or a traceconv Parquet
    file. Steps (ProfilerStep#N, NVTX step_N) are measured as the program lived them: each
    until its host range and its GPU work have both ended. Findings (FINDING_CODES) are
    measured on the steps when the trace marks them, else on the whole window, and ranked by
    what their fix would win a step; the summary starts with what the profile cannot answer.
    The roofline line sets the matrix work against the GPU's peaks (a table of datasheet
    figures; --peak overrides): FLOPs a step, achieved TFLOP/s, MFU against the dense bf16
    peak, and how much of it runs on tensor cores. JSON gives nanoseconds and bytes.

    Example:

        traceconv summary train.pt.trace.json.gz

        traceconv summary run.nsys-rep --format json --threshold GPU_IDLE=50

        traceconv summary trace.json --peak bf16=989.5 --peak bandwidth=3350
    """
    from traceconv.analyses import roofline as RF
    from traceconv.analyses import summary as SM
    from traceconv.analyses.steps import STEP_PATTERN
    from traceconv.analyses.thresholds import Thresholds
    from traceconv.render.summary import summary_text

    limits = Thresholds.from_options(thresholds)
    overrides = RF.parse(peaks)
    with opened([trace]) as source:
        result = SM.summarize(source, limits, top, step_pattern or STEP_PATTERN, sort, overrides)
    click.echo(summary_text(SM.report(result, top), fmt, trace.name, prose_width()), nl=False)


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
    from traceconv.analyses import diff as D
    from traceconv.analyses.steps import STEP_PATTERN
    from traceconv.analyses.thresholds import Thresholds
    from traceconv.render.diff import diff_text

    limits = Thresholds.from_options(thresholds)
    with opened([before]) as first, opened([after]) as second:
        result = D.diff(first, second, limits, step_pattern or STEP_PATTERN)
    click.echo(diff_text(D.report(result, top), fmt, before.name, after.name, prose_width()), nl=False)


@contextlib.contextmanager
def opened(paths: list[Path], one: bool = True) -> Iterator[Source]:
    """The inputs as a Source (traces converted on the way, with progress); what loading found
    worth saying (trace files left unread ...) on stderr; temporary files removed after."""
    from traceconv.analyses.inputs import open_source

    process.imported()  # every analysis command has made its imports by now
    notes: list[str] = []
    bar = Bar("converting")
    try:
        source = open_source(paths, notes, bar, one)
    finally:
        bar.close()
    for text in notes:
        note(text)
    try:
        yield source
    finally:
        source.close()
