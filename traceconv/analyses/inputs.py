"""Any input of an analysis command as a :class:`Source` over Parquet files, read out of core.

Parquet files and dataset directories are read where they lie (each file's schema version is
checked). A trace or a report is converted first, streaming, into a temporary Parquet file
that goes when the Source is closed: memory stays bounded whatever the input's size. A directory
of traces is converted trace by trace. Traces beside Parquet files in a directory are named in a
note, not read; inputs of different sources (a PyTorch trace and an Nsight Systems export) are
refused where an analysis would sum them.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from traceconv import dataset, io, writing
from traceconv.analyses.source import Source
from traceconv.errors import InputError, TraceconvError, UsageError
from traceconv.readers import Progress
from traceconv.readers.base import trace_stem


def open_source(
    paths: Sequence[Path], notes: list[str] | None = None, progress: Progress | None = None, one: bool = True
) -> Source:
    """The inputs' events as one Source (see the module); close it to remove what was converted.

    ``one``: refuse inputs of different sources (every analysis but ``traceconv sql``).
    """
    temporary = Path(tempfile.mkdtemp(prefix="traceconv-input-"))
    try:
        files: list[Path] = []
        for path in paths:
            parquet, traces = listing(Path(path), notes)
            for f in parquet:
                check_dataset(f, notes) if f.is_dir() else io.check_version(f)
            files += parquet + [_converted(t, temporary, progress) for t in traces]
        source = Source(files, name=", ".join(str(p) for p in paths))
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    source.on_close(lambda: shutil.rmtree(temporary, ignore_errors=True))
    if one:
        try:
            one_source(source.formats(), paths)
        except BaseException:
            source.close()
            raise
    return source


def listing(path: Path, notes: list[str] | None = None) -> tuple[list[Path], list[Path]]:
    """An input's Parquet files and, where it holds none, its traces (one of the two lists is empty).

    A directory with both: its Parquet files, and a note naming the traces left unread. A
    partitioned dataset (:mod:`traceconv.dataset`) is the directory itself, read by partition.
    """
    from traceconv.ingest import TRACE_PATTERNS, expand

    if dataset.is_partitioned(path):
        if not dataset.parts(path):
            raise InputError(path, "is a partitioned dataset without parts", "convert the traces into it first")
        return [path], []
    if path.is_dir():
        parquet = sorted(p for p in path.glob("*.parquet") if p.is_file() and not p.name.startswith("."))
        traces = expand(path, TRACE_PATTERNS)
        if parquet:
            if traces and notes is not None:
                notes.append(
                    f"{path}: read its {len(parquet)} Parquet file(s); the {len(traces)} trace file(s) beside them "
                    f"were not read (convert them with `traceconv ingest {path}`)"
                )
            return parquet, []
        if not traces:
            raise InputError(
                path, "holds no traces and no .parquet files", "give a trace, a report or a traceconv dataset"
            )
        return [], traces
    return ([path], []) if io.is_parquet(path) else ([], [path])


def check_dataset(path: Path, notes: list[str] | None = None) -> None:
    """A partitioned dataset's schema version, from its ``_common_metadata`` (no part is opened);
    without one (a run is writing it, or stopped before the end), from every part, and a note."""
    common = path / dataset.COMMON_METADATA
    if common.is_file():
        io.check_version(common)
        return
    if notes is not None:
        notes.append(
            f"{path}: no {dataset.COMMON_METADATA}: the run that writes this dataset is not finished "
            "(or stopped); its complete parts were read"
        )
    for part in dataset.parts(path):
        io.check_version(part)


@contextlib.contextmanager
def salvage_hint(path: Path) -> Iterator[None]:
    """A conversion's error whose hint is to salvage names the command that can (analyses cannot)."""
    try:
        yield
    except TraceconvError as exc:
        if "--salvage" not in exc.hint:
            raise
        raise type(exc)(
            exc.path,
            exc.problem,
            f"convert what can be read with `traceconv ingest --salvage {path}`, then analyse the Parquet file",
        ) from exc


def one_source(sources: Iterable[object], paths: Sequence[Path]) -> None:
    """Refuse inputs whose rows come from different sources (a PyTorch trace and an nsys export)."""
    names = sorted({str(v) for v in sources if v is not None})
    if len(names) > 1:
        where = paths[0] if len(paths) == 1 else ", ".join(str(p) for p in paths)
        raise UsageError(
            where,
            f"holds inputs of different sources ({', '.join(names)}): their operators and ranges are not alike",
            "analyse each source on its own",
        )


def _converted(path: Path, temporary: Path, progress: Progress | None) -> Path:
    out = temporary / f"{len(list(temporary.iterdir())):04d}-{trace_stem(path)}.parquet"
    with salvage_hint(path):
        writing.convert(path, out, progress=progress)
    return out
