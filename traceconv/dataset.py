"""A run of many traces as one hive-partitioned Parquet dataset: ``OUT/rank=R/<trace>.parquet``.

The partition key is the trace's distributed rank (``rank=__HIVE_DEFAULT_PARTITION__`` when
the trace does not say, the name Spark, pyarrow and DuckDB all read as null). Each part is a
complete traceconv file, byte for byte what a conversion of that trace alone writes, rank column
included (Spark, DuckDB, pyarrow and Polars read the overlapping column from the path, with the
same values). The rank is known only once a trace is read, so a part is written under a hidden
temporary name in ``OUT`` and renamed into its partition when complete. ``_common_metadata``
(the schema and schema version, no rows) is written when every part of a run is done, and
removed while a run changes parts: a dataset without it is incomplete.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

PARTITION = "rank"
NULL_VALUE = "__HIVE_DEFAULT_PARTITION__"
COMMON_METADATA = "_common_metadata"
PART_GLOB = f"{PARTITION}=*/*.parquet"


def partition_dir(root: Path, rank: int | None) -> Path:
    return root / f"{PARTITION}={NULL_VALUE if rank is None else int(rank)}"


def is_partitioned(path: Path) -> bool:
    """A directory laid out by this module (its ``_common_metadata`` or a ``rank=`` folder)."""
    if not path.is_dir():
        return False
    return (path / COMMON_METADATA).is_file() or any(p.is_dir() for p in path.glob(f"{PARTITION}=*"))


def parts(root: Path) -> list[Path]:
    """The complete parts of a dataset (hidden temporary files aside), sorted."""
    return sorted(p for p in root.glob(PART_GLOB) if p.is_file() and not p.name.startswith("."))


def existing_part(nominal: Path) -> Path | None:
    """Where the part named like ``nominal`` (``OUT/<trace>.parquet``) lies now, if anywhere."""
    found = [p for p in nominal.parent.glob(f"{PARTITION}=*/{nominal.name}") if p.is_file()]
    return sorted(found)[0] if found else None


def place(tmp: Path, nominal: Path, rank: int | None) -> Path:
    """Rename a complete part into its partition; a part of the same name in another partition
    (the trace's rank changed since) goes."""
    final = partition_dir(nominal.parent, rank) / nominal.name
    final.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, final)
    for other in nominal.parent.glob(f"{PARTITION}=*/{nominal.name}"):
        if other != final:
            other.unlink(missing_ok=True)
    return final


def begin(root: Path) -> None:
    """A run is about to change parts: the dataset is incomplete until :func:`finish`."""
    (root / COMMON_METADATA).unlink(missing_ok=True)


def finish(root: Path, names: Iterable[str]) -> Path:
    """Every part is done: temporary files that killed writers of these parts left go, and the
    schema file is written (atomically)."""
    import pyarrow.parquet as pq

    from traceconv import schema as S

    for name in names:
        for stale in root.glob(f".{name}.*.tmp"):
            stale.unlink(missing_ok=True)
    schema = S.SCHEMA.with_metadata({S.META_SCHEMA_VERSION: S.SCHEMA_VERSION.encode()})
    out = root / COMMON_METADATA
    tmp = root / f".{COMMON_METADATA}.{os.getpid()}.tmp"
    try:
        pq.write_metadata(schema, tmp)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out
