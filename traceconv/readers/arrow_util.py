"""Small Arrow/numpy helpers shared by readers."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from traceconv.readers.base import TraceInfo

I64 = npt.NDArray[np.int64]
Ints = npt.NDArray[np.signedinteger[Any]]  # int32 where the values fit, else int64
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def member_table(size: int, members: Iterable[int]) -> npt.NDArray[np.bool_]:
    """Lookup table: ``table[codes]`` is ``np.isin(codes, members)`` for codes in ``range(size)``,
    without ``np.isin``'s cost per call (a chunk calls it several times)."""
    table = np.zeros(size, dtype=np.bool_)
    table[list(members)] = True
    return table


def numbers(values: Sequence[Any], typ: pa.DataType) -> pa.Array:
    """A numeric array from Python values; values that do not fit (``"inf"``, text, overflow) become null."""
    try:
        return pa.array(values, type=typ)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return pa.array([_fit(v, typ) for v in values], type=typ)


def _fit(v: Any, typ: pa.DataType) -> Any:
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, str):
        try:
            v = float(v)
        except ValueError:
            return None
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if pa.types.is_integer(typ):
        if isinstance(v, float):
            if not v.is_integer():
                return None
            v = int(v)
        bits = typ.bit_width
        lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        return v if isinstance(v, int) and lo <= v <= hi else None
    return float(v) if isinstance(v, (int, float)) else None


def positions(n: int, idx: I64) -> pa.Array | None:
    """For :func:`spread`: where each of ``n`` rows takes its value from (None: every row, in order)."""
    if len(idx) == n:
        return None
    pos = np.full(n, -1, dtype=np.int64)
    pos[idx] = np.arange(len(idx), dtype=np.int64)
    return pa.array(pos, mask=pos < 0)


def spread(values: pa.Array, pos: pa.Array | None) -> pa.Array:
    """Length-``n`` array with ``values`` at the rows :func:`positions` chose, nulls elsewhere."""
    return values if pos is None else values.take(pos)


def one_array(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A column as one array: a single chunk as it is (combining copies even one chunk)."""
    if not isinstance(col, pa.ChunkedArray):
        return col
    return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()


def int_columns(table: pa.Table, names: Iterable[str]) -> dict[str, I64]:
    """Integer columns without nulls (made from numpy arrays) as numpy views, each in its own width."""
    return {name: one_array(table.column(name)).to_numpy() for name in names}


def to_numpy(arr: pa.Array | pa.ChunkedArray, fill: int = -1) -> I64:
    """int64 numpy view of an integer column, nulls replaced by ``fill``."""
    arr = one_array(arr)
    if arr.null_count:
        arr = pc.fill_null(arr, fill)
    return np.asarray(arr.cast(pa.int64()).to_numpy(zero_copy_only=False), dtype=np.int64)


def first_codes(values: I64) -> tuple[I64, I64]:
    """(code of each value, position of each code's first row): codes count the distinct values
    in the order they first come. A hash, not a sort (``np.unique``): the same groups, in
    another order, several times faster on a batch."""
    if len(values) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    codes = np.asarray(pc.dictionary_encode(pa.array(values)).indices, dtype=np.int64)
    new = np.empty(len(codes), dtype=bool)
    new[0] = True
    np.greater(codes[1:], np.maximum.accumulate(codes)[:-1], out=new[1:])  # a code above all before it
    return codes, np.flatnonzero(new)


def dict_codes(arr: pa.Array) -> tuple[list[str | None], I64]:
    """Dictionary-encode: (distinct values, int64 codes with -1 for null)."""
    enc = arr if pa.types.is_dictionary(arr.type) else pc.dictionary_encode(arr)
    values = enc.dictionary.to_pylist()
    return values, to_numpy(enc.indices)


def utf8(raw: pa.Array | pa.ChunkedArray) -> tuple[pa.Array | pa.ChunkedArray, int]:
    """Bytes as UTF-8 text, checked at C speed; where some are not UTF-8, every invalid sequence
    becomes U+FFFD. Also returns how many values had one (0 when all were valid)."""
    try:
        return raw.cast(pa.string()), 0
    except pa.ArrowInvalid:
        pass
    fixed: list[str | None] = []
    bad = 0
    for value in raw.to_pylist():
        if value is None:
            fixed.append(None)
            continue
        try:
            fixed.append(value.decode("utf-8"))
        except UnicodeDecodeError:
            fixed.append(value.decode("utf-8", errors="replace"))
            bad += 1
    return pa.array(fixed, pa.string()), bad


def text_is(arr: pa.Array | pa.ChunkedArray, value: str, fold: bool = False) -> npt.NDArray[np.bool_]:
    """Rows whose text is ``value`` (case-folded: ``fold``), as a numpy mask, decided once per
    distinct value (a dictionary column is not cast row by row)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    distinct, codes = dict_codes(arr)
    hits = [i for i, v in enumerate(distinct) if v is not None and (v.lower() if fold else v) == value]
    return np.isin(codes, hits) if hits else np.zeros(len(arr), dtype=np.bool_)


def constant(n: int, value: str) -> pa.DictionaryArray:
    """``n`` rows of one string, dictionary-encoded (zero indices into a one-entry dictionary)."""
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)), pa.array([value]))


def from_codes(codes: I64, values: Sequence[str | None] | pa.Array) -> pa.Array:
    """Dictionary array from codes into ``values`` (-1 = null; a string array is used as it is)."""
    indices = pa.array(codes.astype(np.int32), mask=codes < 0)
    if not isinstance(values, pa.Array):
        values = pa.array(list(values), type=pa.string())
    return pa.DictionaryArray.from_arrays(indices, values)


def raw_texts(raws: list[msgspec.Raw]) -> pa.Array:
    """A binary array of raw JSON texts (empty: null), built from one join and the lengths:
    no Python object per value (several times faster than ``pa.array`` of the values)."""
    n = len(raws)
    lengths = np.fromiter(map(len, raws), dtype=np.int64, count=n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] >= 2**31:  # past 32-bit offsets: the general conversion
        return pa.array([bytes(r) or None for r in raws], pa.large_binary()).cast(pa.binary())
    valid = lengths > 0
    buffers = [pa.py_buffer(np.packbits(valid, bitorder="little")), pa.py_buffer(offsets.astype(np.int32))]
    return pa.Array.from_buffers(pa.binary(), n, [*buffers, pa.py_buffer(b"".join(raws))], n - int(valid.sum()))


def identity(n: int, info: TraceInfo) -> dict[str, pa.Array]:
    """The per-trace identity columns of ``n`` rows: ``source``, ``trace_id`` and ``rank``."""
    rank = pa.nulls(n, pa.int32()) if info.rank is None else pa.array(np.full(n, info.rank, dtype=np.int32))
    return {"source": constant(n, info.source), "trace_id": constant(n, info.trace_id), "rank": rank}
