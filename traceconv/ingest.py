"""Which output file each input becomes: the naming rules shared by every convert command."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from traceconv.errors import InputError, UsageError
from traceconv.readers.base import trace_stem

TRACE_PATTERNS = ("*.json", "*.json.gz", "*.json.tmp", "*.sqlite", "*.nsys-rep", "*.qdrep")


@dataclass(frozen=True)
class Job:
    source: Path
    output: Path


def _expand(path: Path, patterns: Sequence[str]) -> list[Path]:
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


def plan_jobs(inputs: Sequence[Path], output: Path | None, patterns: Sequence[str] = TRACE_PATTERNS) -> list[Job]:
    """Default: ``trace.json`` -> ``trace.parquet`` beside it; a directory ``run/`` -> ``run.parquet/``."""
    jobs: list[Job] = []
    several = len(inputs) > 1
    for src in inputs:
        src = Path(src)
        if not src.exists():
            raise InputError(src, "does not exist", "check the path")
        if src.is_dir():
            files = _expand(src, patterns)
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
            jobs += [Job(f, _inside(folder / (trace_stem(f) + ".parquet"), folder)) for f in files]
        elif output is not None and (several or output.is_dir() or str(output).endswith(("/", "\\"))):
            jobs.append(Job(src, _inside(output / (trace_stem(src) + ".parquet"), output)))
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
