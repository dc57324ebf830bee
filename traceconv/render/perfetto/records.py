"""Unified rows -> compact records, one per slice, instant or counter sample, each on its track.

A record holds what the timeline needs of a row (track, name, times, ids) in 50 bytes;
names are interned (one id per distinct string, written once into the trace). Records are
made batch by batch and spilled into time buckets (:class:`Spill`), so that the whole
input is never in memory: the writer then takes one bucket at a time, in time order.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

RECORD = np.dtype(
    [
        ("track", "<i4"),
        ("name", "<i4"),
        ("cat", "u1"),
        ("flags", "u1"),
        ("start", "<i8"),
        ("end", "<i8"),
        ("key", "<i8"),  # trace number << KEY_BITS | event_id: unique in the output, and a flow's id
        ("corr", "<i8"),  # CUPTI correlation id, -1 when none
        ("value", "<f8"),  # counter samples: the value
    ]
)
INSTANT, LAUNCHED, COUNTER = 1, 2, 4  # flags
KEY_BITS = 40
EVENT_ID_MASK = (1 << KEY_BITS) - 1
Ints = tuple[np.ndarray[Any, np.dtype[np.int64]], np.ndarray[Any, np.dtype[np.bool_]]]


class Strings:
    """Interned strings: one id (from 1) per distinct string, and those not written out yet."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.texts: list[str] = [""]  # by id
        self.new: list[tuple[int, str]] = []

    def iid(self, text: str) -> int:
        found = self.ids.get(text)
        if found is None:
            found = self.ids[text] = len(self.texts)
            self.texts.append(text)
            self.new.append((found, text))
        return found

    def codes(self, column: pa.Array) -> np.ndarray[Any, np.dtype[np.int64]]:
        """The id of each row's string (0 where null)."""
        encoded = column if pa.types.is_dictionary(column.type) else pc.dictionary_encode(column)
        values = encoded.dictionary.cast(pa.string()).to_pylist()
        lut = np.array([self.iid(v) if v is not None else 0 for v in values] + [0], dtype=np.int64)
        result: np.ndarray[Any, np.dtype[np.int64]] = lut[encoded.indices.fill_null(len(values)).to_numpy()]
        return result

    def take_new(self) -> list[tuple[int, str]]:
        done, self.new = self.new, []
        return done


def ints(batch: pa.RecordBatch, name: str) -> Ints:
    """A column's values (0 where null) and where it has one; all null when the batch lacks it."""
    if name not in batch.schema.names:
        return np.zeros(batch.num_rows, np.int64), np.zeros(batch.num_rows, bool)
    column = batch.column(name)
    valid = column.is_valid().to_numpy(zero_copy_only=False)
    return column.fill_null(0).cast(pa.int64()).to_numpy(zero_copy_only=False), valid


def texts(batch: pa.RecordBatch, name: str) -> list[str | None] | None:
    """A dictionary column's distinct values, or None when the batch lacks the column."""
    if name not in batch.schema.names:
        return None
    column = batch.column(name)
    encoded = column if pa.types.is_dictionary(column.type) else pc.dictionary_encode(column)
    result: list[str | None] = encoded.dictionary.cast(pa.string()).to_pylist()
    return result


def codes(batch: pa.RecordBatch, name: str) -> np.ndarray[Any, np.dtype[np.int64]]:
    """A dictionary column's per-row index into :func:`texts` (-1 where null or missing)."""
    if name not in batch.schema.names:
        return np.full(batch.num_rows, -1, np.int64)
    column = batch.column(name)
    encoded = column if pa.types.is_dictionary(column.type) else pc.dictionary_encode(column)
    result: np.ndarray[Any, np.dtype[np.int64]] = encoded.indices.fill_null(-1).cast(pa.int64()).to_numpy()
    return result


def lookup(values: list[str | None] | None, rows: np.ndarray[Any, Any], fn: Callable[[str], Any], default: Any) -> Any:
    """``fn`` of each row's dictionary value (``default`` where null), computed once per value."""
    table = [fn(v) if v is not None else default for v in values or []]
    return np.array([*table, default])[rows]


def resolve(keys: np.ndarray[Any, Any], make: Callable[[tuple[int, ...], int], int]) -> np.ndarray[Any, Any]:
    """``make(key, first_row)`` once per distinct row of ``keys`` (a 2-D int64 array), spread to every row."""
    if len(keys) == 0:
        return np.zeros(0, np.int32)
    code = np.zeros(len(keys), np.int64)
    for column in keys.T:  # the distinct rows so far numbered (below the row count), one column more each time
        values, number = np.unique(column, return_inverse=True)
        code = np.unique(code * len(values) + number.reshape(-1), return_inverse=True)[1].reshape(-1)
    _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    lut = np.array([make(tuple(int(v) for v in keys[i]), int(i)) for i in first])
    return lut[inverse.reshape(-1)].astype(np.int32)


def records(n: int) -> np.ndarray[Any, np.dtype[np.void]]:
    out = np.zeros(n, RECORD)
    out["corr"] = -1
    return out


class Spill:
    """Records in time buckets on disk: appended batch by batch, read back one bucket at a time.

    ``bounds`` are the bucket boundaries (start times); a record goes into the bucket of its start.
    """

    def __init__(self, folder: Path, bounds: np.ndarray[Any, np.dtype[np.int64]]) -> None:
        self.bounds = bounds
        self.paths = [folder / f"bucket{i}.rec" for i in range(len(bounds) + 1)]
        self._files = [open(p, "wb") for p in self.paths]  # noqa: SIM115 (closed in close())
        self.rows = 0

    def add(self, recs: np.ndarray[Any, np.dtype[np.void]]) -> None:
        bucket = np.searchsorted(self.bounds, recs["start"], side="right")
        order = np.argsort(bucket, kind="stable")
        counts = np.bincount(bucket, minlength=len(self.paths))
        at = 0
        for fh, count in zip(self._files, counts, strict=True):
            if count:
                recs[order[at : at + count]].tofile(fh)
                at += int(count)
        self.rows += len(recs)

    def buckets(self) -> Iterator[tuple[np.ndarray[Any, np.dtype[np.void]], int | None]]:
        """Each bucket's records and the start of the next bucket (None for the last), in time
        order; each file is removed once read."""
        self.close()
        for i, path in enumerate(self.paths):
            recs = np.fromfile(path, dtype=RECORD)
            os.unlink(path)
            yield recs, int(self.bounds[i]) if i < len(self.bounds) else None

    def close(self) -> None:
        for fh in self._files:
            fh.close()

    def discard(self) -> None:
        self.close()
        for path in self.paths:
            path.unlink(missing_ok=True)
