"""``traceconv report``: inputs in, one self-contained HTML report (or a diff of two runs) out."""

from __future__ import annotations

import time
from pathlib import Path

import click

from traceconv.cli import main
from traceconv.cli.analyse import opened
from traceconv.cli.errors import handle_errors
from traceconv.cli.progress import Bar


@main.command()
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Output file.  [default: FIRST.html beside it]")
@click.option(
    "--together",
    is_flag=True,
    help="Two inputs are one run (two ranks ...), not BEFORE and AFTER of a diff.",
)
@click.option("--top", type=click.IntRange(min=1), default=15, show_default=True, help="Operators and kernels shown.")
@click.option(
    "--threshold",
    "thresholds",
    multiple=True,
    metavar="NAME=VALUE",
    help="Override a finding threshold (repeatable), as in `traceconv summary`.",
)
@click.option("--steps", "step_pattern", metavar="REGEX", default=None, help="Regular expression for step names.")
@click.option(
    "--force", is_flag=True, help="Write where the name is not .html, or over a file traceconv did not write."
)
@handle_errors
def report(
    inputs: tuple[Path, ...],
    output: Path | None,
    together: bool,
    top: int,
    thresholds: tuple[str, ...],
    step_pattern: str | None,
    force: bool,
) -> None:
    """Write one HTML file with the charts and tables of a run; with two inputs, their diff too.

    INPUT is a PyTorch trace, an Nsight Systems report or export, a traceconv Parquet file or
    a dataset directory (one file per rank); several inputs are one run, except exactly two,
    which are BEFORE and AFTER (unless --together). The file inlines every script and style
    and fetches nothing: it opens anywhere, offline.

    Example:

        traceconv report trace.json -o report.html

        traceconv report buggy.sqlite fixed.sqlite -o diff.html

        traceconv report run.parquet/ -o run.html
    """
    from traceconv.render.report_output import check_output

    out = output or inputs[0].with_name(inputs[0].name.split(".")[0] + ".html")
    check_output(out, list(inputs), force)  # before the analyses are even imported
    from traceconv.analyses.steps import STEP_PATTERN
    from traceconv.analyses.thresholds import Thresholds
    from traceconv.render import report as R

    opts = R.Options(top, Thresholds.from_options(thresholds), step_pattern or STEP_PATTERN)
    bar = Bar("measuring", unit="parts")
    t0 = time.monotonic()
    try:
        if len(inputs) == 2 and not together:
            with opened([inputs[0]]) as before, opened([inputs[1]]) as after:
                page = R.diff_page(before, after, (inputs[0].name, inputs[1].name), opts, bar)
        else:
            with opened(list(inputs)) as source:
                page = R.one_page(source, ", ".join(p.name for p in inputs), opts, bar)
    finally:
        bar.close()
    written = R.write(page, out)
    click.echo(
        f"{', '.join(map(str, inputs))} -> {written.path} "
        f"({written.bytes / 2**20:,.2f} MiB, {written.charts} charts, {time.monotonic() - t0:.2f} s)"
    )
