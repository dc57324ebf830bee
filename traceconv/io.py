"""Parquet out and in: atomic writes with trace metadata, schema-checked reads, ``read_unified``."""

from __future__ import annotations

import errno
import json
import os
import socket
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pyarrow as pa
import pyarrow.compute as pc

from traceconv import dataset
from traceconv import schema as S
from traceconv.background import BackgroundWriter
from traceconv.errors import InputError, SchemaVersionError, TraceconvError, UnsupportedFormatError, UsageError
from traceconv.parquet_join import Joiner, Piece
from traceconv.readers import Progress, Reader, open_reader, sniff

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
COMPRESSION = {c.name: "zstd" if c.name in ZSTD_COLUMNS else "snappy" for c in S.COLUMNS}
COMPRESSION_LEVEL = {name: 1 for name in ZSTD_COLUMNS}
WRITE_BUFFER = 1 << 18
# Data pages of 256 KiB instead of pyarrow's 1 MiB: the writer thread holds a page's worth of
# each column while it encodes, and the args text of a row group is several pages.
DATA_PAGE = 1 << 18
PARQUET_MAGIC = b"PAR1"
# What pyarrow.parquet.ParquetWriter passes to the class it wraps, where our options do not
# say otherwise (see ``_parquet_writer``).
WRITER_DEFAULTS: dict[str, Any] = {
    "version": "2.6",
    "writer_engine_version": "V2",
    "data_page_version": "1.0",
    "use_compliant_nested_type": True,
    "store_schema": True,
}

if TYPE_CHECKING:
    import pandas as pd


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

        codes, first, counts = np.unique(arr.indices.to_numpy(), return_index=True, return_counts=True)
        values = arr.dictionary.to_pylist()
        order = np.argsort(first)
        merged: dict[Any, int] = {}
        for code, count in zip(codes[order].tolist(), counts[order].tolist(), strict=True):
            merged[values[code]] = merged.get(values[code], 0) + count  # a dictionary may repeat a value
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


def new_writer(sink: Any) -> Any:
    """The Parquet writer of every traceconv output, on ``sink``.

    Dictionary pages only where the schema says dictionary: the args JSON never repeats,
    and trying to dictionary-encode it costs time and size.
    """
    return _parquet_writer(
        sink,
        compression=COMPRESSION,
        compression_level=COMPRESSION_LEVEL,
        use_dictionary=DICTIONARY_COLUMNS,
        write_statistics=STATISTICS_COLUMNS,
        data_page_size=DATA_PAGE,
    )


def write_tables(reader: Reader, tables: Iterable[pa.Table], out: Path, partitioned: bool = False) -> WriteResult:
    """Write to a temporary name beside ``out`` and rename on success: never a half-written file.

    ``partitioned``: ``out`` names a part of a dataset (``OUT/<trace>.parquet``), renamed into
    the partition of the trace's rank (:mod:`traceconv.dataset`) once complete.
    """
    out = Path(out)
    result = WriteResult(path=out)

    def write(tmp: Path) -> None:
        # A buffered stream: the writer asks for its position before every page (an lseek on
        # a plain file, 6% of its time) and writes in small pieces.
        with pa.output_stream(tmp, compression=None, buffer_size=WRITE_BUFFER) as sink:
            writer = new_writer(sink)
            try:
                # Handed over, not queued: the reader makes the next table while one is encoded, and no
                # third waits (the writer is the slower side: a queue holds memory and gains no speed).
                background = BackgroundWriter(
                    lambda t: writer.write_table(t, row_group_size=max(t.num_rows, 1)), depth=0
                )
                try:
                    for table in tables:
                        _tally(result, table)
                        background.put(table)
                        del table  # not kept while the reader makes the next one
                finally:
                    background.close()
                writer.add_key_value_metadata(_metadata(reader, result))
            finally:
                writer.close()

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


def _parquet_writer(sink: pa.NativeFile, **options: Any) -> Any:
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
        return ParquetWriter(sink, S.SCHEMA, **WRITER_DEFAULTS, **options)
    except (ImportError, TypeError):
        import pyarrow.parquet as pq

        return pq.ParquetWriter(sink, S.SCHEMA, **options)


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
    from traceconv.ingest import check_output

    check_output(Path(out), [Path(path)], force=True)
    reader = open_reader(Path(path), fmt, progress=progress, **options)
    encoded = getattr(reader, "encoded", None)  # a reader that encodes its row groups itself (in workers)
    pieces = encoded(new_writer, tally) if encoded is not None else None
    if pieces is not None:
        return write_pieces(reader, pieces, out, partitioned=partitioned)
    return write_tables(reader, reader.tables(), out, partitioned=partitioned)


def read(path: Path, fmt: str | None = None, **options: Any) -> pa.Table:
    """Read one input file into a single unified ``pyarrow.Table`` (metadata on its schema)."""
    reader = open_reader(Path(path), fmt, **options)
    tables = list(reader.tables())
    table = pa.concat_tables(tables) if tables else S.empty_table()
    result = WriteResult(path=Path(path))
    for t in tables:
        _tally(result, t)
    return table.replace_schema_metadata(_metadata(reader, result))


# -- reading traceconv Parquet ----------------------------------------------------------
def file_metadata(path: Path) -> dict[bytes, bytes]:
    import pyarrow.parquet as pq  # not at the top: see _parquet_writer

    try:
        meta = pq.read_metadata(path).metadata or {}
    except (OSError, pa.ArrowInvalid) as exc:
        _not_parquet(Path(path), exc)
    return dict(meta)


_INPUTS = {
    "pytorch": "a PyTorch profiler trace",
    "nsys": "an Nsight Systems export",
    "nsys-report": "an Nsight Systems report",
}


def _not_parquet(path: Path, exc: Exception) -> NoReturn:
    """A file that is not Parquet: name what it is, and the function that reads that."""
    try:
        fmt = sniff(path)
    except TraceconvError:
        fmt = None
    if fmt in _INPUTS:
        raise UnsupportedFormatError(
            path,
            f"is {_INPUTS[fmt]}, not a traceconv Parquet file",
            "read it with traceconv.read(path) (converted in memory), or convert it with "
            "traceconv.convert(path, out) or `traceconv ingest`",
        ) from exc
    raise InputError(path, f"is not a readable Parquet file ({exc})", "convert the trace again") from exc


def check_version(path: Path) -> dict[bytes, bytes]:
    meta = file_metadata(path)
    version = meta.get(S.META_SCHEMA_VERSION)
    if version is None:
        raise SchemaVersionError(
            path, "is not a traceconv Parquet file (no schema version)", "convert the trace with `traceconv ingest`"
        )
    if version.decode() not in S.READABLE_VERSIONS:
        raise SchemaVersionError(
            path,
            f"was written with schema v{version.decode()}, this traceconv reads "
            + ", ".join(f"v{v}" for v in S.READABLE_VERSIONS),
            "convert the original trace again with this traceconv, or read the file with the traceconv that wrote it",
        )
    return meta


def _files(path: Path) -> list[Path]:
    path = Path(path)
    if dataset.is_partitioned(path):
        files = dataset.parts(path)
        if not files:
            raise InputError(path, "is a partitioned dataset without parts", "convert the traces into it first")
        return files
    if path.is_dir():
        files = sorted(p for p in path.glob("*.parquet") if not p.name.startswith("."))
        if not files:
            raise InputError(path, "holds no .parquet files", "run `traceconv ingest` on the traces first")
        return files
    if not path.exists():
        raise InputError(path, "does not exist", "check the path")
    return [path]


def is_parquet(path: Path) -> bool:
    """True for a Parquet file (by its magic bytes) or a directory (a dataset: :func:`parquet_files`
    says if it holds none)."""
    if path.is_dir():
        return True
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == PARQUET_MAGIC
    except FileNotFoundError:
        raise InputError(path, "does not exist", "check the path") from None
    except OSError as exc:
        raise InputError(path, f"cannot be read ({exc.strerror or exc})", "check the path and permissions") from exc


def parquet_files(path: Path) -> list[Path]:
    """The files of a traceconv Parquet file or dataset directory, checked for their schema version
    (a partitioned dataset's through its ``_common_metadata`` where it has one: no part is opened)."""
    path = Path(path)
    files = _files(path)
    common = path / dataset.COMMON_METADATA
    for f in [common] if dataset.is_partitioned(path) and common.is_file() else files:
        check_version(f)
    return files


# A filter: a pyarrow.compute expression, or pyarrow.parquet's list form, [("rank", "=", 7), ...]
# (a list of such lists: OR of ANDs).
Filters = Any


def read_table(
    path: Path,
    kinds: Sequence[str] | None = None,
    columns: Sequence[str] | None = None,
    filters: Filters = None,
) -> pa.Table:
    """A traceconv Parquet file or dataset directory as one ``pyarrow.Table``.

    ``filters`` are pushed down: a partitioned dataset's parts outside them are not opened, and
    row groups whose statistics exclude them are not read.
    """
    path = Path(path)
    files = parquet_files(path)
    _check_names(columns, kinds)
    import pyarrow.dataset as ds  # tens of MB on import: only when reading
    import pyarrow.parquet as pq

    hive = dataset.is_partitioned(path)
    partitioning = ds.HivePartitioning(pa.schema([S.SCHEMA.field(dataset.PARTITION)]), null_fallback=dataset.NULL_VALUE)
    source = ds.dataset(
        [str(f) for f in files],
        format="parquet",
        schema=S.SCHEMA,
        partitioning=partitioning if hive else None,
        partition_base_dir=str(path) if hive else None,
    )
    filt = ds.field("kind").isin(list(kinds)) if kinds is not None else None
    if filters is not None:
        more = filters if isinstance(filters, pc.Expression) else pq.filters_to_expression(filters)
        filt = more if filt is None else filt & more
    return source.to_table(columns=list(columns) if columns is not None else None, filter=filt)


def _check_names(columns: Sequence[str] | None, kinds: Sequence[str] | None) -> None:
    if columns is not None:
        unknown = sorted(set(columns) - set(S.NAMES))
        if unknown:
            raise UsageError(None, f"unknown column(s) {', '.join(unknown)}", "see the schema table in the README")
    if kinds is not None:
        bad = sorted(set(kinds) - set(S.KINDS))
        if bad:
            raise UsageError(None, f"unknown kind(s) {', '.join(bad)}", f"choose from {', '.join(S.KINDS)}")


def read_unified(
    path: str | Path,
    kinds: Sequence[str] | None = None,
    columns: Sequence[str] | None = None,
    filters: Filters = None,
) -> pd.DataFrame:
    """A traceconv Parquet file or dataset directory as a pandas DataFrame.

    ``filters`` (as pyarrow's: ``[("rank", "=", 7)]`` or an expression) are pushed down to the
    read: in a partitioned dataset, ``rank`` filters open only that rank's files.

    Example::

        df = traceconv.read_unified("trace.parquet", kinds=["kernel"], columns=["name", "dur_ns"])
        df = traceconv.read_unified("run.parquet/", filters=[("rank", "in", [0, 1])])
    """
    table = read_table(Path(path), kinds, columns, filters)
    frame: pd.DataFrame = table.to_pandas(types_mapper=_nullable)
    return frame


def _nullable(typ: pa.DataType) -> Any:
    import pandas as pd

    if pa.types.is_integer(typ):
        return {8: pd.Int8Dtype(), 16: pd.Int16Dtype(), 32: pd.Int32Dtype(), 64: pd.Int64Dtype()}[typ.bit_width]
    return None


def trace_metadata(path: Path) -> dict[str, Any]:
    """The decoded traceconv metadata of one Parquet file."""
    meta = check_version(path)
    return {
        "schema_version": meta[S.META_SCHEMA_VERSION].decode(),
        "source": meta.get(S.META_SOURCE, b"").decode(),
        "time_base": meta.get(S.META_TIME_BASE, b"").decode(),
        "trace": json.loads(meta.get(S.META_TRACE, b"{}")),
        "stats": json.loads(meta.get(S.META_STATS, b"{}")),
    }
