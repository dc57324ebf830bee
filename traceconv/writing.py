"""Conversions out: unified tables written to Parquet (atomic, with the trace's metadata, the
row groups encoded here or by workers and joined), and a trace read whole into one table."""

from __future__ import annotations

import errno
import json
import os
import socket
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from traceconv import dataset, process
from traceconv import schema as S
from traceconv.background import BackgroundWriter
from traceconv.errors import TraceconvError
from traceconv.ingest import check_output
from traceconv.parquet_join import Joiner, Piece, UniformChunks, encode
from traceconv.readers import Progress, Reader, open_reader
from traceconv.readers.base import Rewind

DICTIONARY_COLUMNS = [c.name for c in S.COLUMNS if c.type == S.DICT]
# Min/max statistics let a reader skip row groups when it filters (DuckDB, pyarrow.dataset,
# Polars); computing them costs time on every column written, so only the columns that
# users filter on have them.
STATISTICS_COLUMNS = [
    "kind",
    "name",
    "start_ns",
    "end_ns",
    "pid",
    "tid",
    "device",
    "stream",
    "correlation_id",
    "trace_id",
    "rank",
]

# zstd (level 1) for the columns every row fills and the large text; snappy for the rest,
# which are null in most rows (GPU details, links, memory): zstd gains little size there and
# costs much of the writer's time. Both are standard Parquet codecs every reader has.
ZSTD_COLUMNS = frozenset(
    {
        *("source", "trace_id", "event_id", "kind", "category", "phase", "name"),
        *("start_ns", "end_ns", "dur_ns", "pid", "tid", "process_name", "thread_name"),
        *("external_id", "correlation_id", "args"),
    }
)
# Integers as DELTA_BINARY_PACKED (Parquet 2's encoding of differences, which every Parquet reader
# reads): ids and times that grow row by row take a few bits a value, so the writer compresses
# and the readers decompress a fraction of the bytes (bench/README.md: the measurement).
DELTA_COLUMNS = {c.name: "DELTA_BINARY_PACKED" for c in S.COLUMNS if pa.types.is_integer(c.type)}
COMPRESSION = {c.name: "zstd" if c.name in ZSTD_COLUMNS else "snappy" for c in S.COLUMNS}
COMPRESSION_LEVEL = {name: 1 for name in ZSTD_COLUMNS}
WRITE_BUFFER = 1 << 18
REWINDS = 64  # most restarts of one conversion (a reader restarts once per table it finds out of order)
T = TypeVar("T")
# Data pages of 256 KiB instead of pyarrow's 1 MiB: the writer thread holds a page's worth of
# each column while it encodes, and the args text of a row group is several pages.
DATA_PAGE = 1 << 18
# What pyarrow.parquet.ParquetWriter passes to the class it wraps, where our options do not
# say otherwise (see ``_parquet_writer``).
WRITER_DEFAULTS: dict[str, Any] = {
    "version": "2.6",
    "writer_engine_version": "V2",
    "data_page_version": "1.0",
    "use_compliant_nested_type": True,
    "store_schema": True,
}


@dataclass
class WriteResult:
    path: Path
    rows: int = 0
    kinds: dict[str, int] = field(default_factory=dict)
    start_ns: int | None = None
    end_ns: int | None = None
    info: Any = None


Tally = tuple[int, dict[str, int], "int | None", "int | None"]  # rows, rows per kind, first start, last end


def tally(table: pa.Table) -> Tally:
    """What the output's statistics need from one table (pure: runs in worker processes)."""
    kinds = dict(_kind_counts(table["kind"]))
    return table.num_rows, kinds, pc.min(table["start_ns"]).as_py(), pc.max(table["end_ns"]).as_py()


def _merge(result: WriteResult, counted: Tally) -> None:
    rows, kinds, lo, hi = counted
    result.rows += rows
    for kind, count in kinds.items():
        result.kinds[kind] = result.kinds.get(kind, 0) + count
    if lo is not None:
        result.start_ns = lo if result.start_ns is None else min(result.start_ns, lo)
    if hi is not None:
        result.end_ns = hi if result.end_ns is None else max(result.end_ns, hi)


def _kind_counts(kind: pa.ChunkedArray | pa.Array) -> list[tuple[Any, int]]:
    """(kind, rows) in the order the kinds first appear; a dictionary column is counted by its
    codes (no string per row)."""
    arr = kind.combine_chunks() if isinstance(kind, pa.ChunkedArray) else kind
    if pa.types.is_dictionary(arr.type) and arr.null_count == 0 and len(arr):
        import numpy as np

        indices = arr.indices.to_numpy()
        counts = np.bincount(indices, minlength=len(arr.dictionary))
        used = np.flatnonzero(counts)
        first = [int(np.argmax(indices == code)) for code in used.tolist()]  # a handful of kinds a table
        values = arr.dictionary.to_pylist()
        merged: dict[Any, int] = {}
        for code in used[np.argsort(first)].tolist():
            merged[values[code]] = merged.get(values[code], 0) + int(counts[code])  # a dictionary may repeat a value
        return list(merged.items())
    counts = pc.value_counts(arr.cast(pa.string()))
    return [(item["values"], item["counts"]) for item in counts.to_pylist()]


def _tally(result: WriteResult, table: pa.Table) -> None:
    _merge(result, tally(table))


def _metadata(reader: Reader, result: WriteResult) -> dict[bytes, bytes]:
    info = reader.info
    stats = {
        "rows": result.rows,
        "kinds": result.kinds,
        "notes": info.notes,
        "counters": info.counters,
        "input": str(info.path),
        "trace_id": info.trace_id,
        "rank": info.rank,
    }
    return {
        S.META_SCHEMA_VERSION: S.SCHEMA_VERSION.encode(),
        S.META_SOURCE: info.source.encode(),
        S.META_TIME_BASE: info.time_base.encode(),
        S.META_TRACE: json.dumps(info.metadata, default=str).encode(),
        S.META_STATS: json.dumps(stats, default=str).encode(),
    }


def new_writer(sink: Any, repeated: Sequence[str] = (), schema: pa.Schema = S.SCHEMA, piece: bool = False) -> Any:
    """The Parquet writer of every traceconv output, on ``sink``.

    ``schema``: some of the unified schema's columns, for a row group encoded in parts; ``piece``:
    the file is a row group to be joined (``parquet_join``), its footer read for the row group
    only (no Arrow schema in it).

    Dictionary pages where the schema says dictionary, and for the ``repeated`` columns of a
    format whose values repeat (a reader's ``REPEATED``): a PyTorch trace's args JSON never
    repeats, and trying to dictionary-encode it costs time and size; an Nsight Systems export's
    args are a few distinct kernel configurations, which the dictionary writes once instead of
    compressing them row after row.
    """
    return _parquet_writer(
        sink,
        schema,
        store_schema=not piece,
        compression=COMPRESSION,
        compression_level=COMPRESSION_LEVEL,
        use_dictionary=[*DICTIONARY_COLUMNS, *repeated],
        column_encoding=DELTA_COLUMNS,
        write_statistics=STATISTICS_COLUMNS,
        data_page_size=DATA_PAGE,
    )


def write_tables(reader: Reader, tables: Iterable[pa.Table], out: Path, partitioned: bool = False) -> WriteResult:
    """Write to a temporary name beside ``out`` and rename on success: never a half-written file.

    One writer encodes the tables one after another, or, for a reader whose ``SPARSE_GROUPS``
    says that its tables fill few of the schema's columns and have a few sizes, each table is
    encoded apart with the chunks of its uniform columns (one value in every row, or none)
    reused (``parquet_join.UniformChunks``) and the row groups are joined: the same bytes.

    ``partitioned``: ``out`` names a part of a dataset (``OUT/<trace>.parquet``), renamed into
    the partition of the trace's rank (:mod:`traceconv.dataset`) once complete.
    """
    out = Path(out)
    result = WriteResult(path=out)

    repeated = getattr(reader, "REPEATED", ())

    def feed(write_one: Callable[[pa.Table], None], depth: int) -> None:
        background = BackgroundWriter(write_one, depth=depth)
        try:
            for table in tables:
                _tally(result, table)
                background.put(table)
                del table  # not kept while the reader makes the next one
        finally:
            background.close()

    def streamed(tmp: Path) -> None:
        # A buffered stream: the writer asks for its position before every page (an lseek on
        # a plain file, 6% of its time) and writes in small pieces.
        with pa.output_stream(tmp, compression=None, buffer_size=WRITE_BUFFER) as sink:
            writer = new_writer(sink, repeated)
            try:
                # Handed over, not queued: the reader makes the next table while one is encoded, and no
                # third waits (the writer is the slower side: a queue holds memory and gains no speed).
                feed(lambda t: writer.write_table(t, row_group_size=max(t.num_rows, 1)), depth=0)
                writer.add_key_value_metadata(_metadata(reader, result))
            finally:
                writer.close()

    def joined(tmp: Path) -> None:
        piece_writer = partial(new_writer, repeated=repeated)
        uniform = UniformChunks()
        with open(tmp, APPEND_RAW, buffering=0) as sink:
            joiner = Joiner(sink, new_writer)
            # One table queued: a row group whose uniform columns are reused is encoded sooner than
            # the reader makes the next, and the reader need not wait for the writer to take it.
            feed(lambda t: joiner.add(encode(t, piece_writer, uniform)), depth=1)
            joiner.finish(_metadata(reader, result))

    write = joined if getattr(reader, "SPARSE_GROUPS", False) else streamed
    result.path = _atomic(out, write, tables, _placer(reader, out) if partitioned else None)
    result.info = reader.info
    return result


def write_pieces(
    reader: Reader, pieces: Iterable[tuple[Piece, int | None, Tally]], out: Path, partitioned: bool = False
) -> WriteResult:
    """:func:`write_tables` for row groups already encoded (by worker processes): joined in order,
    the same bytes as :func:`write_tables` writes from their tables (``parquet_join``)."""
    out = Path(out)
    result = WriteResult(path=out)

    def write(tmp: Path) -> None:
        with open(tmp, APPEND_RAW, buffering=0) as sink:
            joiner = Joiner(sink, new_writer)
            for piece, source, tally in pieces:
                joiner.add(piece, source)
                _merge(result, tally)
            joiner.finish(_metadata(reader, result))

    result.path = _atomic(out, write, pieces, _placer(reader, out) if partitioned else None)
    result.info = reader.info
    return result


def _placer(reader: Reader, out: Path) -> Callable[[Path], Path]:
    """Where a complete part goes: the partition of its trace's rank, known once it is written."""
    return lambda tmp: dataset.place(tmp, out, reader.info.rank)


APPEND_RAW = "xb"  # a new file (the temporary name holds the process id)


def _atomic(
    out: Path, write: Callable[[Path], None], source: Iterable[Any], finish: Callable[[Path], Path] | None = None
) -> Path:
    """``write`` a temporary file beside ``out``, then rename it to ``out`` (or hand it to ``finish``)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    # The host too: writers on several machines may share the output folder (a cluster's run).
    tmp = out.with_name(f".{out.name}.{socket.gethostname()}-{os.getpid()}.tmp")
    try:
        tmp.unlink(missing_ok=True)
        write(tmp)
        if finish is not None:
            return finish(tmp)
        os.replace(tmp, out)
        return out
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        # Stop the reader now, not when its generator is collected: its temporary files go
        # with it (a traceback kept by the caller would keep them on disk meanwhile).
        close = getattr(source, "close", None)
        if close is not None:
            close()
        if isinstance(exc, OSError) and _no_space(exc):
            raise TraceconvError(
                out,
                f"could not be written: no space left ({exc.strerror or exc})",
                f"free disk space where the output goes and in {tempfile.gettempdir()} (temporary files; "
                "set TMPDIR to use another place)",
            ) from exc
        raise


def _parquet_writer(sink: pa.NativeFile, schema: pa.Schema, **options: Any) -> Any:
    """The class that ``pyarrow.parquet.ParquetWriter`` wraps, made as that wrapper makes it.

    Importing ``pyarrow.parquet`` imports ``pyarrow.fs``, which loads the S3, GCS, Azure and
    HDFS filesystems, OpenSSL and libcrypto, megabytes of RSS in the converting process (and
    in its worker) for code that a write to a local stream never runs. Where this pyarrow
    has no such class or it takes other options, the public wrapper does the same work.
    """
    try:
        from pyarrow._parquet import ParquetWriter

        if not hasattr(ParquetWriter, "add_key_value_metadata"):
            raise ImportError("pyarrow._parquet.ParquetWriter without add_key_value_metadata")
        return ParquetWriter(sink, schema, **(WRITER_DEFAULTS | options))
    except (ImportError, TypeError):
        import pyarrow.parquet as pq

        return pq.ParquetWriter(sink, schema, **options)


def _no_space(exc: OSError) -> bool:
    """Disk full or over quota (pyarrow's errors may carry the reason only in their text)."""
    return exc.errno in (errno.ENOSPC, errno.EDQUOT) or "No space left on device" in str(exc)


def convert(
    path: Path,
    out: Path,
    fmt: str | None = None,
    progress: Progress | None = None,
    partitioned: bool = False,
    **options: Any,
) -> WriteResult:
    """Convert one input file (any supported format) to one unified Parquet file (never onto the input).

    ``partitioned``: ``out`` (``OUT/<trace>.parquet``) is a part of a dataset, which goes to
    ``OUT/rank=R/<trace>.parquet`` (:mod:`traceconv.dataset`).
    """
    check_output(Path(out), [Path(path)], force=True)
    reader = open_reader(Path(path), fmt, progress=progress, **options)
    process.imported()  # the reader's modules are in (the CLI's collection comes back on)
    encoded = getattr(reader, "encoded", None)  # a reader that encodes its row groups itself (in workers)
    pieces = encoded(new_writer, tally) if encoded is not None else None
    if pieces is not None:
        return write_pieces(reader, pieces, out, partitioned=partitioned)
    return rewound(lambda: write_tables(reader, reader.tables(), out, partitioned=partitioned))


def rewound(run: Callable[[], T]) -> T:
    """``run()`` (which reads a reader's tables), run again while the reader asks to start over:
    each time it has learnt how one more of its tables is stored, so at most that many times."""
    for _ in range(REWINDS):
        try:
            return run()
        except Rewind:
            continue
    return run()


def read(path: Path, fmt: str | None = None, **options: Any) -> pa.Table:
    """Read one input file into a single unified ``pyarrow.Table`` (metadata on its schema)."""
    reader = open_reader(Path(path), fmt, **options)
    tables = rewound(lambda: list(reader.tables()))
    table = S.one_table(tables) if tables else S.empty_table()
    result = WriteResult(path=Path(path))
    for t in tables:
        _tally(result, t)
    return table.replace_schema_metadata(_metadata(reader, result))
