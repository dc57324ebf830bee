"""``traceconv perfetto``: inputs in, one timeline file (Perfetto protobuf or Chrome JSON) out."""

from __future__ import annotations

import time
from pathlib import Path

import click

from traceconv import process
from traceconv.cli import main
from traceconv.cli.errors import handle_errors, note
from traceconv.errors import UsageError

SUFFIX = {"proto": ".pftrace", "json": ".trace.json"}


def parse_offsets(items: tuple[str, ...]) -> dict[str, int]:
    """``NAME=NS`` pairs (NS an integer, may be negative)."""
    offsets: dict[str, int] = {}
    for item in items:
        name, sep, value = item.rpartition("=")
        try:
            offsets[name] = int(value.replace("_", ""))
        except ValueError:
            name = ""
        if not sep or not name:
            raise UsageError(None, f"--offset {item!r} is not NAME=NS", "e.g. --offset rank1.json=-1500 (nanoseconds)")
    return offsets


@main.command()
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Output file.  [default: FIRST.pftrace]")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["proto", "json"]),
    default="proto",
    show_default=True,
    help="Perfetto's protobuf trace, or Chrome's JSON trace format (for tools that read only that).",
)
@click.option(
    "--offset",
    "offsets",
    multiple=True,
    metavar="NAME=NS",
    help="Nanoseconds added to the times of one input (as given, its file name or stem) or trace_id "
    "(repeatable): aligns the clocks of the ranks of a job.",
)
@handle_errors
def perfetto(inputs: tuple[Path, ...], output: Path | None, fmt: str, offsets: tuple[str, ...]) -> None:
    """Write the events as a timeline for ui.perfetto.dev: one track per thread and GPU stream.

    INPUT is a PyTorch trace, an Nsight Systems report or export, or a traceconv Parquet
    file or dataset; several go on one timeline, each as its own process groups. Kernels,
    copies, memsets, CUDA calls, NVTX ranges and operators are slices, linked to their
    launching call by flows; memory and GPU metrics are counters. Slices that overlap
    without nesting go on child tracks ("overlap 1", ...), so that none is dropped.

    Example:

        traceconv perfetto run.nsys-rep                       # -> run.pftrace

        traceconv perfetto trace.json run.sqlite -o both.pftrace

        traceconv perfetto rank0.json rank1.json --offset rank1.json=-1500 -o job.pftrace

        traceconv perfetto trace.parquet --format json -o trace.trace.json
    """
    process.skip_pandas_probe()  # before anything that loads pyarrow
    from traceconv.render.perfetto import export

    process.imported()
    shifts = parse_offsets(offsets)
    out = output or inputs[0].with_name(inputs[0].name.split(".")[0] + SUFFIX[fmt])
    t0 = time.monotonic()
    result = export(list(inputs), out, fmt, shifts)
    elapsed = time.monotonic() - t0
    click.echo(f"{', '.join(map(str, inputs))} -> {result.path} ({result.bytes / 2**20:,.1f} MiB in {elapsed:.2f} s)")
    click.echo(
        f"  {result.slices:,} slices, {result.instants:,} instants, {result.counters:,} counter samples, "
        f"{result.flows:,} flows on {result.tracks:,} tracks ({result.lanes:,} for overlapping slices)"
    )
    if result.shift_ns:
        note(f"{result.shift_ns:,} ns added to every time: Perfetto's cannot be negative")
    left = ", ".join(f"{reason} {count:,}" for reason, count in result.skipped.items() if count)
    if left:
        click.echo(f"  left out: {left}")
