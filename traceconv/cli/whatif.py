"""``traceconv whatif``: the step time predicted after a change, from the trace's dependency graph."""

from __future__ import annotations

from pathlib import Path

import click

from traceconv.cli import main
from traceconv.cli.analyse import opened
from traceconv.cli.errors import handle_errors
from traceconv.cli.width import prose_width


@main.command()
@click.argument("traces", nargs=-1, required=True, metavar="TRACE...", type=click.Path(path_type=Path))
@click.option("--remove", "removes", multiple=True, metavar="WHAT",
              help="syncs | copies[:HtoD|DtoH|DtoD] | op:REGEX | host:outside-ops (repeatable)")  # fmt: skip
@click.option("--scale", "scales", multiple=True, metavar="WHAT=FACTOR",
              help="kernel:REGEX=F | op:REGEX=F | host=F | launch=F (repeatable)")  # fmt: skip
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option(
    "--steps",
    "step_pattern",
    metavar="REGEX",
    default=None,
    help="Regular expression for the names of step ranges.  [default: ProfilerStep#N, step_N, iterN]",
)
@click.option("--rank", metavar="R", default=None, help="Apply the changes on this rank only (several ranks).")
@handle_errors
def whatif(
    traces: tuple[Path, ...],
    removes: tuple[str, ...],
    scales: tuple[str, ...],
    fmt: str,
    step_pattern: str | None,
    rank: str | None,
) -> None:
    """What would a step take if a cost went away? The step's dependency graph replayed with the change.

    TRACE is a PyTorch trace, an Nsight Systems report or export, or a traceconv Parquet file
    that marks steps. The host's calls, the GPU work they launched (in order per stream) and the
    calls that wait for the GPU are replayed; the step time (each step from the previous one's
    completion to its own) before and predicted after, and each step's critical path: GPU
    compute, copies, communication, sync waits, launch overhead, host work in operators and
    ranges, other host time. --remove copies also removes the host work that made what an HtoD
    copy carries (the data made on the GPU instead). JSON: `step_ns`, `predicted_step_ns`,
    `critical_path`, `predicted_critical_path`, `changed`.

    Several ranks (a directory of per-rank traces, several traces, an export of several
    processes): every rank is replayed, coupled through the collectives matched across them (a
    collective's transfer starts when its last rank arrives); each rank's step and the job's (the
    slowest rank's), before and predicted. --rank R applies the changes on rank R alone. JSON
    adds `ranks` (`rank`, `step_ns`, `predicted_step_ns` each).

    Example:

        traceconv whatif train.pt.trace.json.gz --remove syncs

        traceconv whatif run.nsys-rep --scale 'kernel:gemm=0.25' --format json

        traceconv whatif train.parquet --remove host:outside-ops --remove 'op:aten::nonzero'

        traceconv whatif runs/ddp/ --scale host=0.5 --rank 1
    """
    from traceconv.analyses import whatif as W
    from traceconv.analyses.steps import STEP_PATTERN
    from traceconv.render.whatif import whatif_text

    if not removes and not scales:
        raise click.UsageError("name a change: --remove WHAT or --scale WHAT=FACTOR (see --help)")
    with opened(list(traces)) as source:
        result = W.whatif(source, list(removes), list(scales), step_pattern or STEP_PATTERN, rank)
    title = traces[0].name if len(traces) == 1 else f"{len(traces)} inputs"
    click.echo(whatif_text(result, fmt, title, prose_width()), nl=False)
