"""Building blocks of the Nsight Systems reader: one source table's rows (:class:`Part`),
names from ``StringIds``, global thread/process ids, and the ``args`` JSON of leftover columns.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeAlias, cast

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from traceconv.readers import arrow_util
from traceconv.readers.arrow_util import I64, first_codes, from_codes, to_numpy
from traceconv.readers.nsys.sql import Database
from traceconv.readers.sorted_keys import SortedKeys, lookup

Bools = npt.NDArray[np.bool_]
Col: TypeAlias = "pa.Array[Any]"
DictCol: TypeAlias = "pa.DictionaryArray[Any, Any]"
ChunkedCol: TypeAlias = "pa.ChunkedArray[Any]"
NONE = -1  # "no value" in the int64 numpy ids below (ids are never negative)
NO_TIME = np.iinfo(np.int64).min  # "no value" for times, which can be negative (before the session start)
LOW24 = 0xFFFFFF
# Columns that hold ids into StringIds: resolved to names where they name the event, never
# copied as text otherwise (StringIds also holds the profiled process's environment).
STRING_ID_COLUMNS = frozenset({"nameId", "textId", "demangledName", "shortName", "mangledName", "jsonTextId"})
_VERSION_SUFFIX = re.compile(r"_v\d{4,}$")  # cudaLaunchKernel_v7000; not the driver's real cuMemAlloc_v2


@dataclass
class Part:
    """The rows of one source table, before event ids, links and the time base are added."""

    table: str
    cols: dict[str, Col]  # unified columns (start_ns/end_ns still relative to the session)
    start: I64
    end: I64  # NO_TIME where the event never ended
    gtid: I64  # global thread id of CPU-side rows, else NONE
    gpid: I64  # global process id (gtid with the thread bits cleared), else NONE
    corr: I64  # correlation id, else NONE
    push_pop: Bools | None = None  # NVTX rows that are push/pop ranges (op links)
    # Note (a format string of one count) -> the rows it counts: summed over a table's batches,
    # and written once the whole table is read.
    tallies: dict[str, int] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.start)

    def take(self, order: I64) -> Part:
        idx = arrow(order)
        return Part(
            self.table,
            {k: v.take(idx) for k, v in self.cols.items()},
            self.start[order],
            self.end[order],
            self.gtid[order],
            self.gpid[order],
            self.corr[order],
            None if self.push_pop is None else self.push_pop[order],
            self.tallies,
        )


def arrow(values: npt.NDArray[Any], mask: Bools | None = None) -> Col:
    """``pa.array`` of a numpy array, typed for mypy (the stubs take a masked int array for booleans)."""
    return cast(Col, pa.array(values, mask=mask))


def as_dict(arr: Any) -> DictCol:
    return cast(DictCol, arr)


def distinct(values: I64) -> I64:
    """Sorted distinct values (sort-based: numpy's hash-based ``unique`` is slow on many distinct ints)."""
    s = np.sort(values)
    return s[np.concatenate(([True], s[1:] != s[:-1]))] if len(s) else s


def column(table: pa.Table, name: str) -> Col | None:
    if name not in table.column_names:
        return None
    return arrow_util.one_array(table[name])


def ints(table: pa.Table, name: str) -> I64:
    """int64 numpy of a column, NONE for null or absent."""
    col = column(table, name)
    return to_numpy(col, NONE) if col is not None else np.full(table.num_rows, NONE, dtype=np.int64)


def times(table: pa.Table, name: str) -> I64:
    """int64 numpy of a time column, NO_TIME for null or absent."""
    col = column(table, name)
    return to_numpy(col, NO_TIME) if col is not None else np.full(table.num_rows, NO_TIME, dtype=np.int64)


def global_pid(gtid: I64) -> I64:
    """Clear the thread bits: ``globalTid & 0xFFFFFFFFFF000000`` (NONE stays NONE)."""
    return np.where(gtid >= 0, (gtid >> 24) << 24, NONE)


def decode_pid(g: I64) -> Col:
    return arrow((g >> 24) & LOW24, g < 0)


def decode_tid(g: I64) -> Col:
    return arrow(g & LOW24, g < 0)


class Strings:
    """``StringIds`` as compact dictionaries: only the strings that rows actually use."""

    def __init__(self, db: Database) -> None:
        table = db.read("StringIds", ["id", "value"])
        self.ids = ints(table, "id")
        value = column(table, "value")
        self.values = value if value is not None else pa.array([], pa.string())

    def names(self, ids: I64, transform: Callable[[str], str] | None = None) -> DictCol:
        codes, first = first_codes(ids)
        uniq = ids[first]
        pos = lookup(uniq, self.ids)
        found = (uniq >= 0) & (pos >= 0)
        values: list[str | None] = self.values.take(arrow(np.maximum(pos, 0))).to_pylist() if len(pos) else []
        values = [v if ok else None for v, ok in zip(values, found.tolist(), strict=True)]
        if transform is not None:
            values = [transform(v) if v is not None else None for v in values]
        return dictionary(codes, values, found)


def dictionary(codes: I64, values: list[str | None], valid: Bools) -> DictCol:
    """Codes into ``values`` (rows whose value is invalid become null), with duplicates merged."""
    kept = [v if ok else None for v, ok in zip(values, valid.tolist(), strict=True)]
    distinct = sorted({v for v in kept if v is not None})
    where = {v: i for i, v in enumerate(distinct)}
    remap = np.array([where[v] if v is not None else -1 for v in kept] or [-1], dtype=np.int64)
    return as_dict(from_codes(remap[codes] if len(codes) else codes, distinct))


def api_name(name: str) -> str:
    return _VERSION_SUFFIX.sub("", name)


def constant(n: int, value: str) -> DictCol:
    return as_dict(arrow_util.constant(n, value))


class NamesByKey:
    """For each key, the value of the *last* row of (table_keys, table_values) with that key, else
    null: the table sorted, and its dictionary made, once for every batch that looks names up."""

    def __init__(self, table_keys: I64, table_values: list[str | None]) -> None:
        self._keys = SortedKeys(table_keys[::-1].copy())
        padded = [*table_values[::-1], None]
        distinct = sorted({v for v in padded if v is not None})
        where = {v: i for i, v in enumerate(distinct)}
        self._remap = np.array([where[v] if v is not None else -1 for v in padded], dtype=np.int64)
        self._distinct = pa.array(distinct, pa.string())  # every batch's dictionary

    def __call__(self, keys: I64) -> DictCol:
        pos = self._keys.find(keys)
        codes = self._remap[np.where(pos >= 0, pos, len(self._remap) - 1)]
        return as_dict(from_codes(codes, self._distinct))


def json_args(table: pa.Table, names: list[str], labels: dict[str, DictCol] | None = None) -> Col | None:
    """``{"label": "text", ..., "col": value, ...}`` per row: ``labels`` (enum codes as their
    labels), then the numeric columns in ``names`` (null -> ``null``).

    Leftover columns repeat (launch type, cache config, ...): each distinct row is written
    once and shared, unless nearly every row is distinct.
    """
    cols: dict[str, Col] = dict(labels or {})
    cols.update(
        (n, c)
        for n in names
        if (c := column(table, n)) is not None and (pa.types.is_integer(c.type) or pa.types.is_floating(c.type))
    )
    if not cols:
        return None
    codes, first = first_codes(row_codes(list(cols.values())))
    if len(first) > max(1024, table.num_rows // 4):
        return _joined_args(cols)
    rows = pa.table(cols).take(arrow(first)).to_pylist()
    texts = [
        json.dumps(
            {k: v if not isinstance(v, float) or np.isfinite(v) else None for k, v in r.items()}, separators=(",", ":")
        )
        for r in rows
    ]
    return pa.array(texts, pa.string()).take(arrow(codes))


def row_codes(cols: list[Col]) -> I64:
    """One int64 per row, equal for equal rows (nulls included): hash-based, no sorting of rows."""
    key = np.zeros(len(cols[0]) if cols else 0, dtype=np.int64)
    radix = 1
    for col in cols:
        enc = as_dict(pc.dictionary_encode(col))
        size = len(enc.dictionary) + 1
        codes = np.asarray(enc.indices.fill_null(size - 1), dtype=np.int64)
        if radix * size >= 2**62:  # renumber what we have before it overflows
            key = np.asarray(as_dict(pc.dictionary_encode(arrow(key))).indices, dtype=np.int64)
            radix = int(key.max()) + 1 if len(key) else 1
        key = key * size + codes
        radix *= size
    return key


def _joined_args(cols: dict[str, Col]) -> Col:
    parts: list[Col | str] = []
    for name, col in cols.items():
        if pa.types.is_dictionary(col.type):  # labels: each distinct one quoted once
            labels = as_dict(col)
            quoted = pa.array([json.dumps(v) for v in labels.dictionary.to_pylist()], pa.string())
            col = quoted.take(labels.indices)
        elif pa.types.is_floating(col.type):
            col = pc.if_else(pc.is_finite(col), col, pa.scalar(None, col.type))
        parts += [("{" if not parts else ",") + json.dumps(name) + ":", pc.cast(col, pa.string())]
    return join_texts(*parts, "}")


def join_texts(*parts: Col | str, null: str = "null") -> Col:
    """Element-wise concatenation of string arrays and constants, null written as ``null``."""
    join: Any = pc.binary_join_element_wise  # the stubs accept no mix of arrays and constants
    return cast(Col, join(*parts, "", null_handling="replace", null_replacement=null))


def leftover(table: pa.Table, used: frozenset[str] | set[str]) -> list[str]:
    """Columns that no unified column holds: they go into ``args``."""
    return [c for c in table.column_names if c not in used and c not in STRING_ID_COLUMNS]
