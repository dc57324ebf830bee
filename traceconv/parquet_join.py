"""One Parquet file from row groups encoded apart (in worker processes), byte for byte as one writer writes it.

A Parquet file is ``PAR1``, its row groups' column chunks one after another, the footer
(Thrift ``FileMetaData``: the schema, every row group's metadata, key-value metadata), the
footer's length and ``PAR1``. A column chunk's pages do not depend on any other row group,
so a row group can be encoded anywhere, as a one-row-group file of its own (:func:`encode`),
and joined later (:class:`Joiner`): its bytes copied in order, its metadata moved by its new
position, the footer written from the metadata of an empty file made by the same writer with
the final key-value metadata. The result equals what one writer makes from the same tables
(tested), so the output is the same whatever the number of processes.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

import pyarrow as pa

from traceconv import thrift as T

MAGIC = b"PAR1"
# Fields that hold a position in the file: RowGroup.file_offset, ColumnChunk.file_offset,
# ColumnMetaData's data, index and dictionary page offsets.
_GROUP_OFFSET, _CHUNK_OFFSET, _CHUNK_META = 5, 2, 3
_META_OFFSETS = (9, 10, 11)
# Written after every row group (not inside one): such a file cannot be joined this way.
_ELSEWHERE = {4: "offset index", 6: "column index", 14: "bloom filter"}
_ROWS, _GROUPS = 3, 4

NewWriter = Callable[[Any], Any]  # a sink -> a ParquetWriter for it (the options of the output)


@dataclass
class Piece:
    """One encoded row group: its column chunks' bytes (``data``, or ``length`` bytes at ``pos`` in a
    file) and its metadata with positions as holes (``parts[0] + varint(offsets[0] + base) + parts[1]
    ...``, base: where the row group lands)."""

    parts: list[bytes]
    offsets: list[int]
    rows: int
    length: int
    data: bytes | None = None
    pos: int = 0


def encode(table: pa.Table, new_writer: NewWriter) -> Piece:
    """``table`` as one row group of a file, encoded as one writer would (Arrow's writer
    leaves out the row group's ordinal, the one field that would say where it goes)."""
    sink = pa.BufferOutputStream()
    writer = new_writer(sink)
    writer.write_table(table, row_group_size=max(table.num_rows, 1))
    writer.close()
    buf = sink.getvalue().to_pybytes()
    footer = _footer(buf)
    groups = T.get(footer, _GROUPS)
    if groups is None or len(groups.items) != 1:
        raise T.ThriftError("a piece must hold exactly one row group")
    group = groups.items[0]
    _holes(group)
    parts, offsets = T.encode_parts(group)
    end = len(buf) - 8 - int.from_bytes(buf[-8:-4], "little")
    return Piece(parts, offsets, table.num_rows, end - len(MAGIC), buf[len(MAGIC) : end])


def _footer(buf: bytes) -> T.Fields:
    if buf[: len(MAGIC)] != MAGIC or buf[-len(MAGIC) :] != MAGIC:
        raise T.ThriftError("not a Parquet file")
    length = int.from_bytes(buf[-8:-4], "little")
    return T.decode(buf[-8 - length : -8])


def _holes(group: T.Fields) -> None:
    """Mark every position in a row group's metadata as a hole, relative to its first byte."""
    base = T.get(group, _GROUP_OFFSET)
    start = base if base is not None else len(MAGIC)

    def hole(fields: T.Fields, fid: int) -> None:
        for f in fields:
            if f[0] == fid and f[2]:  # Arrow writes ColumnChunk.file_offset (deprecated) as 0
                f[2] = T.Hole(f[2] - start)

    hole(group, _GROUP_OFFSET)
    for chunk in T.get(group, 1).items:
        for fid, what in _ELSEWHERE.items():
            if fid != 14 and T.get(chunk, fid) is not None:
                raise T.ThriftError(f"a row group with a {what} cannot be moved")
        hole(chunk, _CHUNK_OFFSET)
        meta = T.get(chunk, _CHUNK_META)
        if T.get(meta, 14) is not None:
            raise T.ThriftError("a row group with a bloom filter cannot be moved")
        for fid in _META_OFFSETS:
            hole(meta, fid)


class Joiner:
    """Writes pieces to ``sink`` (an unbuffered file) in order, then the footer."""

    def __init__(self, sink: IO[bytes], new_writer: NewWriter) -> None:
        self._sink = sink
        self._new_writer = new_writer
        self._groups: list[bytes] = []
        self._rows = 0
        self._pos = len(MAGIC)
        sink.write(MAGIC)

    def add(self, piece: Piece, source: int | None = None) -> None:
        """The next row group; its bytes are ``piece.data``, or in the file open as ``source``."""
        self._groups.append(T.fill_parts(piece.parts, piece.offsets, self._pos))
        if piece.data is not None:
            self._sink.write(piece.data)
        elif source is not None:
            _copy(source, self._sink.fileno(), piece.pos, piece.length)
        else:
            raise ValueError("a piece without its bytes")
        self._pos += piece.length
        self._rows += piece.rows

    def finish(self, metadata: dict[bytes, bytes]) -> None:
        """The footer: an empty file's (same writer, ``metadata`` added) with the row groups and rows."""
        sink = pa.BufferOutputStream()
        writer = self._new_writer(sink)
        writer.add_key_value_metadata(metadata)
        writer.close()
        footer = _footer(sink.getvalue().to_pybytes())
        T.put(footer, _ROWS, T.I64, self._rows)
        T.put(footer, _GROUPS, T.LIST, T.Raw(T.list_header(len(self._groups), T.STRUCT) + b"".join(self._groups)))
        data = T.encode(footer)
        self._sink.write(data + len(data).to_bytes(4, "little") + MAGIC)


def _copy(src: int, dst: int, pos: int, length: int) -> None:
    while length > 0:
        done = os.copy_file_range(src, dst, length, pos)
        if done <= 0:
            raise OSError(f"could not copy {length} bytes of an encoded row group")
        pos += done
        length -= done
