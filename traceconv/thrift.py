"""Thrift's compact protocol, as much as a Parquet footer uses: read into fields, written back the same.

A struct is kept as a list of ``[field id, type, value]`` in the order it was read, so that
what is written back is byte for byte what was read wherever nothing was changed (writers
emit fields in id order with the short header form, as this module does). Values: ints for
the integer types, ``bytes`` for binary, a :class:`List` for lists and sets, a nested field
list for structs, ``True``/``False`` for booleans (carried by the field's type).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

BOOL_TRUE, BOOL_FALSE, BYTE, I16, I32, I64, DOUBLE, BINARY, LIST, SET, MAP, STRUCT = range(1, 13)
Fields = list[list[Any]]  # [[field id, type, value], ...]


class ThriftError(ValueError):
    """The bytes are not compact-protocol Thrift of the shape expected."""


@dataclass
class Raw:
    """A value already encoded: written as it is."""

    data: bytes


@dataclass
class Hole:
    """A position to be filled in later (:func:`encode_parts`); ``value`` is relative."""

    value: int


@dataclass
class Spliced:
    """A value encoded around holes (what :func:`encode_parts` returns), written as it is with
    ``shift`` added to every hole's value (a column chunk's metadata moved within its row group)."""

    parts: list[bytes]
    offsets: list[int]
    shift: int = 0


@dataclass
class List:
    elem: int  # the elements' type
    items: list[Any]


class Reader:
    def __init__(self, data: bytes | memoryview, pos: int = 0) -> None:
        self.data = data
        self.pos = pos

    def _byte(self) -> int:
        try:
            b = self.data[self.pos]
        except IndexError:
            raise ThriftError("Thrift data ends early") from None
        self.pos += 1
        return b

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self._byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def value(self, typ: int) -> Any:
        if typ in (BOOL_TRUE, BOOL_FALSE):  # inside a list: one byte
            return self._byte() == BOOL_TRUE
        if typ == BYTE:
            return struct.unpack("b", bytes([self._byte()]))[0]
        if typ in (I16, I32, I64):
            return self.zigzag()
        if typ == DOUBLE:
            self.pos += 8
            return struct.unpack("<d", self.data[self.pos - 8 : self.pos])[0]
        if typ == BINARY:
            n = self.varint()
            self.pos += n
            return self.data[self.pos - n : self.pos]
        if typ in (LIST, SET):
            elem, size = self.list_header()
            return List(elem, [self.value(elem) for _ in range(size)])
        if typ == STRUCT:
            return self.fields()
        raise ThriftError(f"Thrift type {typ} is not used by Parquet footers")

    def list_header(self) -> tuple[int, int]:
        """A list's (element type, size)."""
        head = self._byte()
        return head & 0x0F, head >> 4 if head >> 4 != 15 else self.varint()

    def header(self, last: int) -> tuple[int, int] | None:
        """The next field's (id, type) in a struct whose previous field was ``last``; None at its end."""
        head = self._byte()
        if head == 0:
            return None
        typ, delta = head & 0x0F, head >> 4
        return (last + delta if delta else self.zigzag()), typ

    def field_value(self, typ: int) -> Any:
        """The value of a field of type ``typ`` (a boolean field's is in its type)."""
        return typ == BOOL_TRUE if typ in (BOOL_TRUE, BOOL_FALSE) else self.value(typ)

    def skip(self, typ: int) -> None:
        """Past a field's value, making nothing of it."""
        try:
            self.pos = _skip(self.data, self.pos, typ)
        except IndexError:
            raise ThriftError("Thrift data ends early") from None

    def fields(self) -> Fields:
        out: Fields = []
        last = 0
        while (field := self.header(last)) is not None:
            last, typ = field
            out.append([last, typ, self.field_value(typ)])
        return out


def _skip(data: bytes | memoryview, pos: int, typ: int) -> int:
    """Where a value of type ``typ`` at ``pos`` ends (IndexError: the data ends first)."""
    if typ in (BOOL_TRUE, BOOL_FALSE):  # a field's: in its type
        return pos
    if typ in (I16, I32, I64):
        while data[pos] & 0x80:
            pos += 1
        return pos + 1
    if typ == STRUCT:
        while head := data[pos]:
            pos += 1
            if not head >> 4:  # the long form: the field id follows
                pos = _skip(data, pos, I16)
            pos = _skip(data, pos, head & 0x0F)
        return pos + 1
    if typ in (BINARY, LIST, SET):
        if typ == BINARY:
            size, elem = 0, BYTE
        else:
            head = data[pos]
            size, elem = head >> 4, head & 0x0F
            pos += 1
        if typ == BINARY or size == 15:
            size = shift = 0
            while True:
                b = data[pos]
                pos += 1
                size |= (b & 0x7F) << shift
                if not b & 0x80:
                    break
                shift += 7
        if elem in (BYTE, BOOL_TRUE, BOOL_FALSE):  # a byte an element
            if pos + size > len(data):
                raise IndexError(pos + size)
            return pos + size
        for _ in range(size):
            pos = _skip(data, pos, elem)
        return pos
    if typ == BYTE:
        return pos + 1
    if typ == DOUBLE:
        return pos + 8
    raise ThriftError(f"Thrift type {typ} is not used by Parquet footers")


def _varint(n: int, out: bytearray) -> None:
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _zigzag(n: int, out: bytearray) -> None:
    _varint((n << 1) ^ (n >> 63), out)


def _value(typ: int, value: Any, out: bytearray, holes: list[tuple[int, int]] | None) -> None:
    if isinstance(value, Raw):
        out += value.data
    elif isinstance(value, Hole):
        if holes is None:
            raise ThriftError("a hole outside encode_parts")
        holes.append((len(out), value.value))
    elif isinstance(value, Spliced):
        if holes is None:
            raise ThriftError("holes outside encode_parts")
        out += value.parts[0]
        for offset, part in zip(value.offsets, value.parts[1:], strict=True):
            holes.append((len(out), offset + value.shift))
            out += part
    elif typ in (BOOL_TRUE, BOOL_FALSE):
        out.append(BOOL_TRUE if value else BOOL_FALSE)
    elif typ == BYTE:
        out += struct.pack("b", value)
    elif typ in (I16, I32, I64):
        _zigzag(value, out)
    elif typ == DOUBLE:
        out += struct.pack("<d", value)
    elif typ == BINARY:
        _varint(len(value), out)
        out += value
    elif typ in (LIST, SET):
        out += list_header(len(value.items), value.elem)
        for item in value.items:
            _value(value.elem, item, out, holes)
    elif typ == STRUCT:
        write_fields(value, out, holes)
    else:
        raise ThriftError(f"Thrift type {typ} is not used by Parquet footers")


def write_fields(fields: Fields, out: bytearray, holes: list[tuple[int, int]] | None = None) -> None:
    last = 0
    for fid, typ, value in fields:
        wire = (BOOL_TRUE if value else BOOL_FALSE) if typ in (BOOL_TRUE, BOOL_FALSE) else typ
        if 0 < fid - last <= 15:
            out.append((fid - last) << 4 | wire)
        else:
            out.append(wire)
            _zigzag(fid, out)
        if typ not in (BOOL_TRUE, BOOL_FALSE):
            _value(typ, value, out, holes)
        last = fid
    out.append(0)


def encode(fields: Fields) -> bytes:
    out = bytearray()
    write_fields(fields, out)
    return bytes(out)


def decode(data: bytes) -> Fields:
    reader = Reader(data)
    fields = reader.fields()
    if reader.pos != len(data):
        raise ThriftError(f"{len(data) - reader.pos} bytes after the Thrift struct")
    return fields


def get(fields: Fields, fid: int) -> Any:
    for f in fields:
        if f[0] == fid:
            return f[2]
    return None


def put(fields: Fields, fid: int, typ: int, value: Any) -> None:
    """Set field ``fid`` (kept in id order)."""
    for f in fields:
        if f[0] == fid:
            f[1], f[2] = typ, value
            return
    fields.append([fid, typ, value])
    fields.sort(key=lambda f: f[0])


def list_header(size: int, elem: int) -> bytes:
    out = bytearray()
    if size < 15:
        out.append(size << 4 | elem)
    else:
        out.append(0xF0 | elem)
        _varint(size, out)
    return bytes(out)


def encode_parts(fields: Fields) -> tuple[list[bytes], list[int]]:
    """``fields`` encoded around their :class:`Hole` values (integers): the bytes between them, and their values."""
    out = bytearray()
    holes: list[tuple[int, int]] = []
    write_fields(fields, out, holes)
    parts, values, at = [], [], 0
    for pos, value in holes:
        parts.append(bytes(out[at:pos]))
        values.append(value)
        at = pos
    parts.append(bytes(out[at:]))
    return parts, values


def fill_parts(parts: list[bytes], values: list[int], base: int) -> bytes:
    """What :func:`encode_parts` split, with ``base`` added to every hole (as zigzag varints)."""
    out = bytearray(parts[0])
    for value, part in zip(values, parts[1:], strict=True):
        _zigzag(value + base, out)
        out += part
    return bytes(out)
