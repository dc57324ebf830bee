"""``traceconv ops``: torch's ``key_averages()`` table from a trace file, or traceconv's view of it."""

from __future__ import annotations

from pathlib import Path

import click

from traceconv import process
from traceconv.cli import main
from traceconv.cli.errors import handle_errors, note
from traceconv.cli.width import terminal_width
from traceconv.render.ops_columns import SORT_CHOICES


@main.command()
@click.argument("trace", type=click.Path(path_type=Path))
@click.option(
    "--like",
    type=click.Choice(["torch"]),
    default=None,
    help="Give torch's key_averages() exactly: its rows, numbers and table.  [default: traceconv's view]",
)
@click.option("--group-by-shape", is_flag=True, help="One row per operator and input shapes (record_shapes).")
@click.option(
    "--group-by-stack",
    "stack_n",
    type=click.IntRange(min=0),
    default=0,
    metavar="N",
    help="One row per operator and first N stack frames (with_stack and the verbose config).",
)
@click.option(
    "--sort",
    type=click.Choice(SORT_CHOICES),
    default=None,
    help="Column to sort by, largest first (ours or torch's names).  [default: gpu_total_ns, or cpu_total_ns "
    "without GPU time]",
)
@click.option(
    "--top",
    type=click.IntRange(min=0),
    default=None,
    help="Rows to show; 0 shows all.  [default: 25 in a table or Markdown, all in CSV and JSON]",
)
@click.option(
    "--format", "fmt", type=click.Choice(["table", "csv", "json", "markdown"]), default="table", show_default=True
)
@handle_errors
def ops(
    trace: Path, like: str | None, group_by_shape: bool, stack_n: int, sort: str | None, top: int | None, fmt: str
) -> None:
    """Operators as torch.profiler's key_averages() counts them: CPU and CUDA time, memory, calls.

    TRACE is a PyTorch trace (a tensorboard_trace_handler file too), a traceconv Parquet
    file, or an Nsight Systems export made with --pytorch=autograd-nvtx or
    autograd-shapes-nvtx. With --like torch: the rows and numbers of prof.key_averages()
    for the session that wrote the trace, and its table(). Without: traceconv's view
    (CUDA API calls apart, profiler overhead out of operator GPU time, annotations as
    ranges) and a footer saying, per column, how and why it differs from torch's.
    JSON and CSV give nanoseconds and bytes.

    Example:

        traceconv ops trace.json --like torch --sort cuda_time_total

        traceconv ops trace.json --group-by-shape --format json > ops.json

        traceconv ops run.sqlite --top 10
    """
    from traceconv.analyses import key_averages as KA
    from traceconv.render.ops import ops_text

    process.imported()
    table = KA.load(trace, by_shape=group_by_shape, stack_n=stack_n)
    compute = KA.key_averages if like == "torch" else KA.operators
    result = compute(table, by_shape=group_by_shape, stack_n=stack_n)
    click.echo(ops_text(result, fmt, trace.name, sort, top, terminal_width(None)), nl=False)
    for remark in result.notes:
        note(remark)
