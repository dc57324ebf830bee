"""Any input as one unified table in memory: what the library's callers and the tests load.

The commands read their inputs out of core instead (:func:`traceconv.analyses.inputs.open_source`);
both list a directory, check versions and refuse mixed sources with the same rules.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Union

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from traceconv import io, writing
from traceconv import schema as S
from traceconv.analyses import inputs
from traceconv.errors import UsageError

Data = Union[pa.Table, pd.DataFrame]


def load(
    path: str | Path,
    columns: Sequence[str] | None = None,
    kinds: Sequence[str] | None = None,
    notes: list[str] | None = None,
) -> pa.Table:
    """Any input as one unified table: a trace, an Nsight Systems report or export, traceconv
    Parquet, or a directory of Parquet files or of traces.

    Parquet (a file recognised by its magic bytes, or a directory of them) is read with
    :func:`traceconv.io.read_table`; anything else is converted in memory with
    :func:`traceconv.writing.read`. ``columns`` and ``kinds`` narrow the result (and the Parquet
    read). What a user should know about the input (trace files beside Parquet files that were
    not read) is appended to ``notes``. Inputs that mix PyTorch traces and Nsight Systems
    exports are refused: their operators and ranges are not the same thing.
    """
    path = Path(path)
    if columns is not None:
        unknown = sorted(set(columns) - set(S.NAMES))
        if unknown:
            raise UsageError(None, f"unknown column(s) {', '.join(unknown)}", "see the schema table in the README")
    parquet, traces = inputs.listing(path, notes)
    if parquet:
        table = io.read_table(path, kinds=kinds, columns=columns)
        meta = (
            {S.META_TRACE: json.dumps(io.trace_metadata(parquet[0])["trace"])}
            if len(parquet) == 1 and parquet[0].is_file()
            else None
        )
    else:
        tables = [_converted(t, columns, kinds) for t in traces]
        meta = tables[0].schema.metadata if len(tables) == 1 else None
        table = S.one_table([t.replace_schema_metadata(None) for t in tables])
    if meta is not None:  # one input: its own metadata (the GPUs it ran on ...) goes along
        table = table.replace_schema_metadata({S.META_TRACE: meta[S.META_TRACE]} if S.META_TRACE in meta else None)
    if "source" in table.column_names and table.num_rows:
        inputs.one_source(pc.unique(table["source"].cast(pa.string())).drop_null().to_pylist(), [path])
    return table


def _converted(path: Path, columns: Sequence[str] | None, kinds: Sequence[str] | None) -> pa.Table:
    with inputs.salvage_hint(path):
        table = writing.read(path)
    if kinds is not None:
        table = table.filter(pc.is_in(table["kind"].cast(pa.string()), pa.array(list(kinds), pa.string())))
    return table.select(list(columns)) if columns is not None else table
