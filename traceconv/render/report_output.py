"""Where a report may be written: the checks that run before any work (and before the analyses
are imported), so that a refused ``-o`` answers at once."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from traceconv.errors import UsageError
from traceconv.ingest import check_output as check_parquet_output

SUFFIXES = (".html", ".htm")
GENERATOR = "traceconv report"  # the <meta name="generator"> of every report: what may be replaced


def check_output(out: Path, inputs: Sequence[Path], force: bool = False) -> None:
    """Refuse an output that is an input or inside one (a dataset directory), or a directory; without
    ``force`` also one not named .html, or an existing file that is not a traceconv report."""
    check_parquet_output(out, inputs, force=True)  # an input, a directory: never, whatever --force says
    target = out.resolve()
    for src in inputs:
        if Path(src).is_dir() and Path(src).resolve() in target.parents:
            raise UsageError(out, "is inside an input of this command", "give -o a path outside the input folders")
    if force:
        return
    if out.suffix.lower() not in SUFFIXES:
        raise UsageError(out, "does not end in .html, but a report is HTML", "name it .html, or give --force")
    if out.exists() and not is_report(out):
        raise UsageError(
            out, "exists and is not a report traceconv wrote: it would be replaced", "give -o another name or --force"
        )


def is_report(path: Path) -> bool:
    """An HTML file whose head names traceconv report as its generator."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return f'<meta name="generator" content="{GENERATOR}">'.encode() in head
