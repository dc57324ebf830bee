"""The inputs of a timeline: each one as traceconv Parquet, read in bounded batches.

A trace or an Nsight Systems export is first converted into a temporary Parquet file (the
converter streams, in bounded memory), so that every input is read the same way: batch by
batch, only the columns the timeline needs. A first, cheap pass (:func:`survey`) reads the
start times alone: how many rows, the earliest time, and a sample that places the time
buckets so that each holds about the same number of rows.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from traceconv import io, writing
from traceconv.errors import UsageError

COLUMNS = (
    "trace_id",
    "kind",
    "phase",
    "name",
    "start_ns",
    "end_ns",
    "pid",
    "tid",
    "pid_label",
    "tid_label",
    "process_name",
    "thread_name",
    "device",
    "stream",
    "event_id",
    "launch_event_id",
    "correlation_id",
    "bytes",
    "total_allocated_bytes",
    "total_reserved_bytes",
    "value",  # GPU metric samples (kind metric), where the file has them
    "unit",
)
BATCH_ROWS = 1 << 16
BUCKET_ROWS = 1 << 17  # rows per time bucket, on average: what the writer holds at once
MAX_BUCKETS = 256  # files open at once while scanning; larger inputs get larger buckets
SAMPLE = 1 << 16  # start times kept to place the buckets


@dataclass
class Input:
    path: Path  # as given
    files: list[Path]  # traceconv Parquet
    label: str
    rows: int = 0
    first_ns: int | None = None
    bounds: np.ndarray[Any, np.dtype[np.int64]] = field(default_factory=lambda: np.zeros(0, np.int64))
    trace_ids: list[str | None] = field(default_factory=list)

    def batches(self, columns: tuple[str, ...] = COLUMNS) -> Iterator[pa.RecordBatch]:
        import pyarrow.parquet as pq  # reading only (see writing._parquet_writer)

        for path in self.files:
            with pq.ParquetFile(path, pre_buffer=False) as parquet:
                present = [c for c in columns if c in parquet.schema_arrow.names]
                yield from parquet.iter_batches(batch_size=BATCH_ROWS, columns=present, use_threads=False)


def open_inputs(paths: list[Path], folder: Path) -> list[Input]:
    """Every input as Parquet: converted into ``folder`` when it is not Parquet already."""
    inputs = []
    for i, path in enumerate(paths):
        path = Path(path)
        if io.is_parquet(path):
            files = io.parquet_files(path)
        else:
            files = [folder / f"input{i}.parquet"]
            writing.convert(path, files[0])
        inputs.append(Input(path, files, _label(path, paths)))
    return inputs


def _label(path: Path, paths: list[Path]) -> str:
    """The input's file name, or its path where two inputs share a name."""
    same = [p for p in paths if Path(p).name == path.name]
    return str(path) if len(same) > 1 else path.name


def survey(source: Input) -> None:
    """Rows, earliest start, the traces inside, and the bucket boundaries of ``source``."""
    kept: list[np.ndarray[Any, Any]] = []
    trace_ids: set[str | None] = set()
    every = max(1, sum(_rows(f) for f in source.files) // SAMPLE)
    for batch in source.batches(("start_ns", "trace_id")):
        start = batch.column("start_ns").drop_null().to_numpy()
        source.rows += batch.num_rows
        if len(start):
            low = int(start.min())
            source.first_ns = low if source.first_ns is None else min(source.first_ns, low)
            kept.append(start[::every].copy())  # not a view: it would keep the whole batch
        trace_ids.update(batch.column("trace_id").unique().cast(pa.string()).to_pylist())
    source.trace_ids = sorted(trace_ids, key=lambda t: (t is None, t or ""))
    buckets = min(math.ceil(source.rows / BUCKET_ROWS), MAX_BUCKETS)
    if buckets > 1 and kept:
        sample = np.sort(np.concatenate(kept))
        source.bounds = np.unique(sample[(np.arange(1, buckets) * len(sample)) // buckets])


def _rows(path: Path) -> int:
    import pyarrow.parquet as pq

    rows: int = pq.ParquetFile(path).metadata.num_rows
    return rows


def offsets_for(inputs: list[Input], given: Mapping[str, int]) -> dict[tuple[int, str | None], int]:
    """(input number, trace_id) -> ns to add, from ``--offset NAME=NS``: NAME is an input as
    given, its file name or stem, or a trace_id inside an input."""
    out: dict[tuple[int, str | None], int] = {}
    used: set[str] = set()
    for i, source in enumerate(inputs):
        names = {str(source.path), source.path.name, source.path.name.split(".")[0], source.label}
        whole = next((given[n] for n in names if n in given), 0)
        used.update(n for n in names if n in given)
        for trace_id in source.trace_ids:
            own = given.get(trace_id) if trace_id is not None else None
            if own is not None:
                used.add(str(trace_id))
            out[i, trace_id] = whole if own is None else own
    unknown = sorted(set(given) - used)
    if unknown:
        raise UsageError(
            None,
            f"--offset names {', '.join(unknown)}, which is no input and no trace in them",
            "name an input as given, by its file name or stem, or a trace_id",
        )
    return out
