"""Parquet in: schema-checked reads of traceconv Parquet files and datasets, ``read_unified``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pyarrow as pa
import pyarrow.compute as pc

from traceconv import dataset
from traceconv import schema as S
from traceconv.errors import InputError, SchemaVersionError, TraceconvError, UnsupportedFormatError, UsageError
from traceconv.readers import sniff

if TYPE_CHECKING:
    import pandas as pd

PARQUET_MAGIC = b"PAR1"


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


def up_to_date(source: Path, nominal: Path) -> bool:
    """A part of ``source`` exists in the dataset of ``nominal`` (``OUT/<trace>.parquet``), was written
    by this schema version, and is newer than the input."""
    part = dataset.existing_part(nominal)
    if part is None:
        return False
    try:
        check_version(part)
        return part.stat().st_mtime >= Path(source).stat().st_mtime
    except (TraceconvError, OSError):
        return False


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
    row groups whose statistics exclude them are not read. Each dictionary column has one
    dictionary, whatever the row groups and files it was read from (:func:`schema.one_table`).
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
    return S.one_table([source.to_table(columns=list(columns) if columns is not None else None, filter=filt)])


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
