"""``traceconv ranks``: a multi-rank run rank by rank, and its collectives across the ranks."""

from __future__ import annotations

from pathlib import Path

import click

from traceconv.cli import main
from traceconv.cli.analyse import opened
from traceconv.cli.errors import handle_errors
from traceconv.cli.width import prose_width


@main.command()
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["table", "json", "markdown"]), default="table", show_default=True)
@click.option(
    "--steps",
    "step_pattern",
    metavar="REGEX",
    default=None,
    help="Regular expression for the names of step ranges.  [default: ProfilerStep#N, step_N, iterN]",
)
@click.option(
    "--threshold",
    "thresholds",
    multiple=True,
    metavar="NAME=VALUE",
    help="Override a finding threshold (repeatable), e.g. STRAGGLER=20, LOW_OVERLAP=50, COMM_BOUND=10.",
)
@handle_errors
def ranks(inputs: tuple[Path, ...], fmt: str, step_pattern: str | None, thresholds: tuple[str, ...]) -> None:
    """Per rank: compute, communication, copies, idle and overlap; collectives across ranks; stragglers.

    INPUT is a directory of per-rank PyTorch traces, a traceconv dataset directory, an Nsight
    Systems export with several processes, or several of these (one per rank or node). Each
    rank's GPU time is measured over its window (first to last GPU activity) and over its
    steps; collectives are matched across the ranks of their process group, with skew, last
    rank and bus bandwidth (NCCL-tests' formulas); clock offsets come from the collectives'
    ends. JSON: `ranks`, `collectives`, `clock_offsets_ns`, `stragglers` (times in ns).

    Example:

        traceconv ranks runs/ddp/

        traceconv ranks job.sqlite --format json > ranks.json

        traceconv ranks node0.nsys-rep node1.nsys-rep --steps '^step_\\d+$'
    """
    from traceconv.analyses import ranks as R
    from traceconv.analyses.steps import STEP_PATTERN
    from traceconv.analyses.thresholds import Thresholds
    from traceconv.render.ranks import ranks_text

    limits = Thresholds.from_options(thresholds)
    with opened(list(inputs)) as source:
        result = R.analyse(source, step_pattern or STEP_PATTERN, limits)
    title = inputs[0].name if len(inputs) == 1 else f"{len(inputs)} inputs"
    click.echo(ranks_text(result, fmt, title, prose_width()), nl=False)
