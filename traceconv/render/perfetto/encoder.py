"""The protobuf wire format, written by hand: one message at a time, or a column of messages at once.

Perfetto's trace is a ``Trace`` message: ``repeated TracePacket packet = 1``, so the file is
the packets one after another, each as field 1 (tag, length, bytes). The few packets that
describe tracks and names are made one at a time (:func:`message`). The millions that carry
slices are made a column at a time with numpy: a :class:`Rows` holds one byte string per
event (all of them in one buffer, with their lengths), and fields, sub-messages and whole
packets are built by concatenating such columns row by row (:func:`concat`), so that no
Python code runs per event.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

VARINT, I64, LEN = 0, 1, 2


# -- one message at a time ------------------------------------------------------------------
def varint(value: int) -> bytes:
    """``value`` as a protobuf varint (negative int64 values as their two's complement, 10 bytes)."""
    value &= (1 << 64) - 1
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def tag(number: int, wire: int) -> bytes:
    return varint(number << 3 | wire)


def field(number: int, value: int | float | str | bytes | bool | None) -> bytes:
    """One field: ints and bools as varints, floats as doubles, text and bytes length-delimited;
    ``None`` (an unset optional field) as nothing."""
    if value is None:
        return b""
    if isinstance(value, bool | int):
        return tag(number, VARINT) + varint(int(value))
    if isinstance(value, float):
        return tag(number, I64) + struct.pack("<d", value)
    data = value.encode() if isinstance(value, str) else value
    return tag(number, LEN) + varint(len(data)) + data


def message(*fields: tuple[int, Any]) -> bytes:
    """A message from ``(field number, value)`` pairs, in that order; a list value repeats the field."""
    out = bytearray()
    for number, value in fields:
        for item in value if isinstance(value, list) else [value]:
            out += field(number, item)
    return bytes(out)


# -- a column of messages at once -------------------------------------------------------------
@dataclass(frozen=True)
class Rows:
    """One byte string per row: ``data`` holds them all, one after another; ``lengths`` their sizes."""

    data: np.ndarray[Any, np.dtype[np.uint8]]
    lengths: np.ndarray[Any, np.dtype[np.int64]]

    def __len__(self) -> int:
        return len(self.lengths)


Parts = list[Rows]  # a message per row, as the pieces that make it, not yet put together


def varints(values: np.ndarray[Any, Any]) -> Rows:
    """Each value as a varint (int64 as its two's complement, as protobuf writes int64 fields)."""
    v = np.asarray(values).astype(np.int64).view(np.uint64)
    length = _varint_length(v)
    width = int(length.max()) if len(v) else 1
    groups = np.empty((len(v), width), dtype=np.uint8)
    rest = v.copy()
    for i in range(width):  # byte i of every value: 7 bits, and the high bit where more follow
        groups[:, i] = (rest & np.uint64(0x7F)).astype(np.uint8) | np.where(length > i + 1, 0x80, 0).astype(np.uint8)
        rest >>= np.uint64(7)
    keep = np.arange(width) < length[:, None]
    return Rows(groups[keep], length)


def _varint_length(v: np.ndarray[Any, Any]) -> np.ndarray[Any, np.dtype[np.int64]]:
    length = np.ones(len(v), dtype=np.int64)
    for bits in range(7, 64, 7):
        length += v >= np.uint64(1 << bits)
    return length


def fixed64(values: np.ndarray[Any, Any]) -> Rows:
    """Each value as 8 little-endian bytes (``fixed64``, ``double``)."""
    v = np.ascontiguousarray(values, dtype=np.dtype(values.dtype).newbyteorder("<"))
    return Rows(v.view(np.uint8), np.full(len(v), 8, dtype=np.int64))


def constant(data: bytes, present: np.ndarray[Any, np.dtype[np.bool_]]) -> Rows:
    """``data`` in the rows where ``present``, nothing in the others."""
    count = int(np.count_nonzero(present))
    flat = np.tile(np.frombuffer(data, dtype=np.uint8), count)
    return Rows(flat, np.where(present, len(data), 0).astype(np.int64))


def select(rows: Rows, present: np.ndarray[Any, np.dtype[np.bool_]] | None) -> Rows:
    """``rows`` where ``present``, empty elsewhere (same row count)."""
    if present is None:
        return rows
    return Rows(rows.data[np.repeat(present, rows.lengths)], np.where(present, rows.lengths, 0))


def size(parts: Parts) -> np.ndarray[Any, np.dtype[np.int64]]:
    total = np.zeros(len(parts[0]), dtype=np.int64)
    for part in parts:
        total += part.lengths
    return total


def concat(parts: Parts) -> Rows:
    """Row ``i`` of the result is row ``i`` of each part, one after another."""
    lengths = size(parts)
    out = np.empty(int(lengths.sum()), dtype=np.uint8)
    offset = np.cumsum(lengths) - lengths
    for part in parts:
        if len(part.data):
            src_start = np.cumsum(part.lengths) - part.lengths
            out[np.repeat(offset - src_start, part.lengths) + np.arange(len(part.data))] = part.data
        offset += part.lengths
    return Rows(out, lengths)


def scalar_field(number: int, values: np.ndarray[Any, Any], present: np.ndarray[Any, Any] | None = None) -> Parts:
    """A varint field in every row (or only where ``present``)."""
    everywhere = np.ones(len(values), dtype=bool) if present is None else present
    return [constant(tag(number, VARINT), everywhere), select(varints(values), present)]


def double_field(number: int, values: np.ndarray[Any, Any], present: np.ndarray[Any, Any]) -> Parts:
    return [constant(tag(number, I64), present), select(fixed64(values.astype(np.float64)), present)]


def nested(number: int, inner: Parts, present: np.ndarray[Any, Any] | None = None) -> Parts:
    """``inner`` as a length-delimited field (a sub-message); rows not ``present`` get nothing."""
    everywhere = np.ones(len(inner[0]), dtype=bool) if present is None else present
    body = inner if present is None else [select(p, present) for p in inner]
    return [constant(tag(number, LEN), everywhere), select(varints(size(inner)), present), *body]


def repeated_fixed64(number: int, values: np.ndarray[Any, Any], counts: np.ndarray[Any, Any]) -> Parts:
    """``counts[i]`` fixed64 fields per row, taking ``values`` in order (a repeated, unpacked field)."""
    head = np.frombuffer(tag(number, I64), dtype=np.uint8)
    each = np.empty((len(values), len(head) + 8), dtype=np.uint8)
    each[:, : len(head)] = head
    each[:, len(head) :] = np.ascontiguousarray(values, dtype="<u8").view(np.uint8).reshape(-1, 8)
    return [Rows(each.reshape(-1), np.asarray(counts, dtype=np.int64) * each.shape[1])]
