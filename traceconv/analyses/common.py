"""What every analysis shares: loading any input, narrowing it to a DataFrame, summary statistics."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Union

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pandas.core.groupby import SeriesGroupBy

from traceconv import io
from traceconv import schema as S
from traceconv.errors import InputError, TraceconvError, UsageError
from traceconv.io import is_parquet

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
    :func:`traceconv.io.read`. ``columns`` and ``kinds`` narrow the result (and the Parquet
    read). What a user should know about the input (trace files beside Parquet files that were
    not read) is appended to ``notes``. A directory that mixes PyTorch traces and Nsight Systems
    exports is refused: their operators and ranges are not the same thing.
    """
    path = Path(path)
    if columns is not None:
        unknown = sorted(set(columns) - set(S.NAMES))
        if unknown:
            raise UsageError(None, f"unknown column(s) {', '.join(unknown)}", "see the schema table in the README")
    if path.is_dir():
        table = _load_dir(path, columns, kinds, notes)
    elif is_parquet(path):
        table = io.read_table(path, kinds=kinds, columns=columns)
    else:
        table = _converted(path, columns, kinds)
    _one_source(path, table)
    return table


def _load_dir(
    path: Path, columns: Sequence[str] | None, kinds: Sequence[str] | None, notes: list[str] | None
) -> pa.Table:
    from traceconv.ingest import TRACE_PATTERNS, expand

    parquet = [p for p in path.glob("*.parquet") if p.is_file() and not p.name.startswith(".")]
    traces = expand(path, TRACE_PATTERNS)
    if parquet:
        if traces and notes is not None:
            notes.append(
                f"{path}: read its {len(parquet)} Parquet file(s); the {len(traces)} trace file(s) beside them were "
                f"not read (convert them with `traceconv ingest {path}`)"
            )
        return io.read_table(path, kinds=kinds, columns=columns)
    if not traces:
        raise InputError(path, "holds no traces and no .parquet files", "give a trace, a report or a traceconv dataset")
    return pa.concat_tables([_converted(t, columns, kinds).replace_schema_metadata(None) for t in traces])


def _converted(path: Path, columns: Sequence[str] | None, kinds: Sequence[str] | None) -> pa.Table:
    """A trace or report converted in memory; a hint to salvage names the command that can."""
    try:
        table = io.read(path)
    except TraceconvError as exc:
        if "--salvage" not in exc.hint:
            raise
        raise type(exc)(
            exc.path,
            exc.problem,
            f"convert what can be read with `traceconv ingest --salvage {path}`, then analyse the Parquet file",
        ) from exc
    if kinds is not None:
        table = table.filter(pc.is_in(table["kind"].cast(pa.string()), pa.array(list(kinds), pa.string())))
    return table.select(list(columns)) if columns is not None else table


def _one_source(path: Path, table: pa.Table) -> None:
    if "source" not in table.column_names or not table.num_rows:
        return
    sources = sorted(str(v) for v in pc.unique(table["source"].cast(pa.string())).drop_null().to_pylist())
    if len(sources) > 1:
        raise UsageError(
            path,
            f"holds inputs of different sources ({', '.join(sources)}): their operators and ranges are not alike",
            "analyse each source on its own",
        )


def frame(data: Data, columns: Sequence[str], kinds: Sequence[str] | None = None) -> pd.DataFrame:
    """The rows of ``kinds`` and the given schema ``columns`` as a new DataFrame.

    Integers become nullable ``Int64`` (missing stays missing, never -1 or NaN) and strings
    categoricals with a clean dictionary, whatever the dictionaries of the input chunks.
    """
    missing = [c for c in (*columns, *(["kind"] if kinds is not None else [])) if c not in _names(data)]
    if missing:
        raise UsageError(
            None,
            f"the input lacks column(s) {', '.join(missing)}",
            "load it with traceconv.read or read_table without narrowing the columns",
        )
    if isinstance(data, pd.DataFrame):
        keep = data["kind"].astype("string").isin(list(kinds)) if kinds is not None else None
        rows = data if keep is None else data.loc[keep.to_numpy(dtype=bool)]
        picked: pd.DataFrame = rows.loc[:, list(columns)].reset_index(drop=True)
        return picked
    table = data
    if kinds is not None:
        table = table.filter(pc.is_in(table["kind"].cast(pa.string()), pa.array(list(kinds), pa.string())))
    table = table.select(list(columns))
    out = {name: _series(table[name]) for name in columns}
    result: pd.DataFrame = pd.DataFrame(out, index=pd.RangeIndex(table.num_rows))
    return result


def _names(data: Data) -> list[str]:
    return list(data.columns) if isinstance(data, pd.DataFrame) else data.column_names


def _series(col: pa.ChunkedArray[Any]) -> pd.Series[Any]:
    typ = col.type
    if pa.types.is_dictionary(typ) or pa.types.is_string(typ) or pa.types.is_large_string(typ):
        # Re-encode: chunk dictionaries may differ or even repeat a value, which pandas refuses.
        encoded: Any = pc.dictionary_encode(col.cast(pa.string())).combine_chunks()
        codes = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False)
        text: pd.Series[Any] = pd.Series(pd.Categorical.from_codes(codes, pd.Index(encoded.dictionary.to_pylist())))
        return text
    if pa.types.is_integer(typ):
        ints: Any = col.cast(pa.int64()).combine_chunks()
        values = pc.fill_null(ints, 0).to_numpy(zero_copy_only=False).astype(np.int64)
        missing = pc.is_null(ints).to_numpy(zero_copy_only=False).astype(bool)
        numbers: pd.Series[Any] = pd.Series(pd.arrays.IntegerArray(values, missing))
        return numbers
    other: pd.Series[Any] = pd.Series(col.to_numpy())
    return other


# -- statistics ---------------------------------------------------------------------------
STATS = ("total", "avg", "med", "min", "max", "std")


def describe(grouped: SeriesGroupBy[Any, Any], prefix: str) -> pd.DataFrame:
    """Count and total/avg/median/min/max/stddev of one duration per group, nulls skipped.

    NVIDIA's definitions (``nsys stats``): the median of an even count is the midpoint of
    the two middle values; the standard deviation is the sample one (n - 1), 0 for a
    single value and null for none. Totals, minima and maxima stay exact integers.
    """
    agg = grouped.agg(["count", "sum", "mean", "median", "min", "max", "std"])
    count = agg["count"].astype("int64")
    std = agg["std"].astype("float64").where(count != 1, 0.0).where(count > 0)
    stats: pd.DataFrame = pd.DataFrame(
        {
            f"{prefix}_count": count,
            f"{prefix}_total_ns": agg["sum"].astype("Int64").where(count > 0),
            f"{prefix}_avg_ns": agg["mean"].astype("float64"),
            f"{prefix}_med_ns": agg["median"].astype("float64"),
            f"{prefix}_min_ns": agg["min"].astype("Int64"),
            f"{prefix}_max_ns": agg["max"].astype("Int64"),
            f"{prefix}_std_ns": std,
        }
    )
    return stats
