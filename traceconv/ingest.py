"""Which output file each input becomes: the naming rules shared by every convert command.

An output never replaces an input, nor (without ``force``) a file that traceconv did not
write, nor goes (without ``force``) to a name that does not end in ``.parquet``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from traceconv.dataset import existing_part
from traceconv.errors import InputError, UsageError
from traceconv.readers.base import trace_stem

PARQUET_MAGIC = b"PAR1"
_OUR_KEY = b"traceconv.schema_version"  # in the footer of every Parquet file traceconv writes
_FOOTER_MAX = 64 << 20

TRACE_PATTERNS = ("*.json", "*.json.gz", "*.json.tmp", "*.sqlite", "*.nsys-rep", "*.qdrep")


@dataclass(frozen=True)
class Job:
    """``output``: the file written, or for a part of a partitioned dataset its name in the
    dataset's folder (``OUT/<trace>.parquet``, written to ``OUT/rank=R/``: :mod:`traceconv.dataset`)."""

    source: Path
    output: Path
    partitioned: bool = False


def expand(path: Path, patterns: Sequence[str]) -> list[Path]:
    """The trace files directly in ``path`` matching ``patterns``, sorted."""
    found: set[Path] = set()
    for pattern in patterns:
        found.update(p for p in path.glob(pattern) if p.is_file())
    return sorted(found)


def _inside(child: Path, folder: Path) -> Path:
    """Output paths derived from input names must stay inside the output folder."""
    resolved = child.resolve()
    if folder.resolve() not in resolved.parents:
        raise UsageError(child, "would be written outside the output folder", "rename the input file")
    return child


def plan_jobs(
    inputs: Sequence[Path],
    output: Path | None,
    patterns: Sequence[str] = TRACE_PATTERNS,
    force: bool = False,
    partitioned: bool = False,
) -> list[Job]:
    """Default: ``trace.json`` -> ``trace.parquet`` beside it; a directory ``run/`` -> ``run.parquet/``.

    ``partitioned``: the traces that go to a directory make a hive-partitioned dataset there.
    Raises :class:`UsageError` for an output that would replace an input, one that exists and
    is not a traceconv output, or one not named ``.parquet`` (the last two unless ``force``).
    """
    jobs = _jobs(inputs, output, patterns, partitioned)
    sources = [job.source for job in jobs]
    for job in jobs:
        check_output((job.partitioned and existing_part(job.output)) or job.output, sources, force)
    return jobs


def _jobs(inputs: Sequence[Path], output: Path | None, patterns: Sequence[str], partitioned: bool) -> list[Job]:
    jobs: list[Job] = []
    several = len(inputs) > 1
    for src in inputs:
        src = Path(src)
        if not src.exists():
            raise InputError(src, "does not exist", "check the path")
        if src.is_dir():
            files = expand(src, patterns)
            if not files:
                raise InputError(
                    src,
                    "holds no trace files (" + ", ".join(patterns) + ")",
                    "give the folder that tensorboard_trace_handler wrote, or the files themselves",
                )
            folder = (
                output
                if output is not None and not several
                else (
                    (output / (src.name + ".parquet")) if output is not None else src.with_name(src.name + ".parquet")
                )
            )
            if folder.exists() and not folder.is_dir():
                raise UsageError(
                    folder,
                    f"is a file, and the directory {src} becomes a directory of Parquet files, one per trace",
                    "give -o a directory (it is made if needed)",
                )
            jobs += [Job(f, _inside(folder / (trace_stem(f) + ".parquet"), folder), partitioned) for f in files]
        elif output is not None and (several or output.is_dir() or str(output).endswith(("/", "\\"))):
            jobs.append(Job(src, _inside(output / (trace_stem(src) + ".parquet"), output), partitioned))
        elif output is not None:
            jobs.append(Job(src, output))
        else:
            jobs.append(Job(src, src.with_name(trace_stem(src) + ".parquet")))
    seen: dict[Path, Path] = {}
    for job in jobs:
        key = job.output.resolve()
        if key in seen:
            raise UsageError(
                job.source,
                f"and {seen[key]} would both be written to {job.output}",
                "give them different names or separate -o folders",
            )
        seen[key] = job.source
    return jobs


def check_output(out: Path, inputs: Sequence[Path], force: bool = False) -> None:
    """Refuse an output that would destroy data (see :func:`plan_jobs`)."""
    for src in inputs:
        if _same(out, src):
            raise UsageError(out, "is an input of this command: writing there would destroy it", "give -o another name")
    if out.exists() and out.is_dir():
        raise UsageError(
            out, "is a directory", "give -o a file name ending in .parquet, or a new directory name ending in /"
        )
    if force:
        return
    if out.suffix != ".parquet":
        raise UsageError(
            out, "does not end in .parquet, but traceconv writes Parquet there", "name it .parquet, or give --force"
        )
    if out.exists() and not is_traceconv_output(out):
        raise UsageError(
            out,
            "exists and is not a file traceconv wrote: it would be replaced",
            "give -o another name, or --force to replace it",
        )


def is_traceconv_output(path: Path) -> bool:
    """A Parquet file whose footer holds traceconv's schema version (read without pyarrow)."""
    try:
        with open(path, "rb") as fh:
            if fh.read(4) != PARQUET_MAGIC:
                return False
            fh.seek(0, 2)
            size = fh.tell()
            if size < 12:
                return False
            fh.seek(size - 8)
            tail = fh.read(8)
            length = int.from_bytes(tail[:4], "little")
            if tail[4:] != PARQUET_MAGIC or not 0 < length <= min(size - 12, _FOOTER_MAX):
                return False
            fh.seek(size - 8 - length)
            return _OUR_KEY in fh.read(length)
    except OSError:
        return False


def _same(a: Path, b: Path) -> bool:
    if a.exists() and b.exists():
        try:
            return a.samefile(b)
        except OSError:
            return False
    return a.resolve() == b.resolve()
