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
_DATA_PAGE, _DICTIONARY_PAGE = 9, 11
_META_OFFSETS = (_DATA_PAGE, 10, _DICTIONARY_PAGE)
# RowGroup's columns, total_byte_size (before compression) and total_compressed_size;
# ColumnMetaData's sizes before and after compression.
_COLUMNS, _BYTES, _GROUP_SIZE = 1, 2, 6
_UNCOMPRESSED, _COMPRESSED = 6, 7
# Written after every row group (not inside one): such a file cannot be joined this way.
# ColumnChunk's offset and column index offsets; ColumnMetaData's bloom filter offset.
_ELSEWHERE = {4: "offset index", 6: "column index"}
_BLOOM_FILTER = 14
_ROWS, _GROUPS = 3, 4

# (sink, schema=the unified schema, piece=False) -> a ParquetWriter with the output's options
# (``piece``: a row group to be joined, its footer read for the row group only)
NewWriter = Callable[..., Any]


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


def encode(table: pa.Table, new_writer: NewWriter, uniform: UniformChunks | None = None) -> Piece:
    """``table`` as one row group of a file, encoded as one writer would (Arrow's writer
    leaves out the row group's ordinal, the one field that would say where it goes).

    ``uniform``: the chunks of columns that hold one value in every row (or none) are taken
    from there where a row group of as many rows had the same column, not encoded again (such
    a chunk depends only on the value and the number of rows); the writer encodes the others,
    and the chunks of this table's uniform columns are kept there for the row groups to come.
    """
    n = table.num_rows
    if uniform is None or not n:
        return _piece(*_chunks(_one_group(table, new_writer)), n)
    fields = table.schema
    keys = [(fields.field(i), _uniform_key(c, n)) for i, c in enumerate(table.columns)]
    known = uniform.find(n, keys)
    todo = [i for i, chunk in enumerate(known) if chunk is None]
    if len(todo) == len(keys):
        group, chunks = _chunks(_one_group(table, new_writer))
    else:
        # the columns not known; none (every column known): column 0 all the same, for the
        # row group's own fields
        group, encoded = _chunks(_one_group(table.select(todo or [0]), new_writer))
        fresh = iter(encoded)
        chunks = [chunk if chunk is not None else next(fresh) for chunk in known]
    uniform.keep(n, [(keys[i], chunks[i]) for i in todo if keys[i][1] is not None])
    return _piece(group, chunks, n)


# The most entries of a dictionary column's dictionary for its chunk to be kept when it is uniform
# (the names of an export's processes and threads are a few hundred).
_KEPT_DICTIONARY = 1024
_NULL = ("null",)


def _uniform_key(column: pa.ChunkedArray, n: int) -> tuple[Any, ...] | None:
    """What the chunk of a column that holds one value in every row, or none, depends on besides
    the number of rows: its value, and for a dictionary column its dictionary (written whole,
    whatever the rows use); None for any other column."""
    if column.num_chunks != 1:
        return _NULL if column.null_count == n and not pa.types.is_dictionary(column.type) else None
    array = column.chunk(0)
    if pa.types.is_dictionary(array.type):
        if len(array.dictionary) > _KEPT_DICTIONARY:
            return None
        if array.null_count == n:
            value = None
        elif array.null_count or (value := _one_value(array.indices)) is None:
            return None
        return ("dictionary", value, tuple(array.dictionary.to_pylist()))
    if array.null_count == n:
        return _NULL
    if array.null_count or not pa.types.is_integer(array.type):
        return None
    value = _one_value(array)
    return None if value is None else ("integer", value)


def _one_value(array: pa.Array) -> int | None:
    """The value of an integer array without nulls whose values are all equal; None otherwise."""
    values = array.to_numpy(zero_copy_only=True)
    first = values[0]
    if first != values[-1]:  # most columns that vary: no pass over them
        return None
    return int(first) if int(values.min()) == int(values.max()) == first else None


def _one_group(table: pa.Table, new_writer: NewWriter) -> memoryview:
    """``table`` as a file of one row group, whose footer is only read for its row group's metadata."""
    sink = pa.BufferOutputStream()
    writer = new_writer(sink, schema=table.schema, piece=True)
    writer.write_table(table, row_group_size=max(table.num_rows, 1))
    writer.close()
    return memoryview(sink.getvalue()).cast("B")  # unsigned: its bytes are read one by one


@dataclass
class Chunk:
    """One column chunk: its bytes, its metadata encoded around its positions (relative to its
    first byte) and its size before compression (what the row group's size adds up)."""

    data: bytes | memoryview
    meta: T.Spliced
    size: int


class UniformChunks:
    """Column chunks of uniform columns (one value in every row, or none) by row count, column
    and value: most row groups of an Nsight Systems export have one of a few sizes and many
    columns of one value (the kind, the process, the device) or none (the other kinds'
    columns), so each such chunk is encoded a few times a file, not once a row group. The
    chunks of the ``limit`` latest row counts are kept.

    The readers' dictionaries hold each value once: Arrow writes a dictionary with repeated
    values with bytes that depend on what it wrote before, so no writer's output is reproducible then."""

    def __init__(self, limit: int = 8) -> None:
        self._limit = limit
        self._by_rows: dict[int, dict[tuple[pa.Field, Any], Chunk]] = {}  # the latest row count last
        # each dictionary's values once, whatever the keys that hold them (an export's ~300
        # thread names are the dictionary of every batch's thread_name)
        self._dictionaries: dict[tuple[Any, ...], tuple[Any, ...]] = {}

    def find(self, n: int, keys: list[tuple[pa.Field, Any]]) -> list[Chunk | None]:
        """The kept chunk of each (column, value) of a row group of ``n`` rows; None where there is none."""
        have = self._by_rows.pop(n, None)
        if have is None:
            have = {}
            while len(self._by_rows) >= self._limit:
                del self._by_rows[next(iter(self._by_rows))]
        self._by_rows[n] = have
        return [have.get(key) if key[1] is not None else None for key in keys]

    def keep(self, n: int, chunks: list[tuple[tuple[pa.Field, Any], Chunk]]) -> None:
        """Keep the chunks of uniform columns of a row group of ``n`` rows (copied out of its file's bytes)."""
        have = self._by_rows[n]
        for (column, key), chunk in chunks:
            if key[0] == "dictionary":
                key = (*key[:2], self._dictionaries.setdefault(key[2], key[2]))
            have[column, key] = Chunk(bytes(chunk.data), chunk.meta, chunk.size)


def _footer_start(buf: bytes | memoryview) -> int:
    """Where a Parquet file's footer (its Thrift ``FileMetaData``) begins; it ends 8 bytes before the end."""
    if bytes(buf[: len(MAGIC)]) != MAGIC or bytes(buf[-len(MAGIC) :]) != MAGIC:
        raise T.ThriftError("not a Parquet file")
    return len(buf) - 8 - int.from_bytes(buf[-8:-4], "little")


def _footer(buf: bytes) -> T.Fields:
    return T.decode(buf[_footer_start(buf) : -8])


def _chunks(buf: bytes | memoryview) -> tuple[T.Fields, list[Chunk]]:
    """The one row group of a file: its metadata and its column chunks, each movable on its own.

    Read from the footer's bytes, decoding no more than the positions and sizes: a chunk's
    metadata is its bytes, cut where a position is written (the holes).
    """
    reader = T.Reader(buf, _footer_start(buf))
    last = 0
    while (field := reader.header(last)) is not None:
        last, typ = field
        if last == _GROUPS:
            if reader.list_header()[1] != 1:
                break
            return _group(reader, buf)  # what follows (key-value metadata, column orders) is not needed
        reader.skip(typ)
    raise T.ThriftError("a piece must hold exactly one row group")


def _group(reader: T.Reader, buf: bytes | memoryview) -> tuple[T.Fields, list[Chunk]]:
    """A RowGroup's fields (its columns left out) and its column chunks."""
    group: T.Fields = []
    chunks: list[Chunk] = []
    last = 0
    while (field := reader.header(last)) is not None:
        last, typ = field
        if last == _COLUMNS:
            for _ in range(reader.list_header()[1]):
                chunks.append(_chunk(reader, buf))
            group.append([last, typ, None])
        else:
            group.append([last, typ, reader.field_value(typ)])
    return group, chunks


def _chunk(reader: T.Reader, buf: bytes | memoryview) -> Chunk:
    """A ColumnChunk: its bytes in the file and its metadata's bytes cut around its positions."""
    begin = reader.pos
    cuts: list[tuple[int, int, int]] = []  # a position's varint: where it starts and ends, its value
    sizes: dict[int, int] = {}
    pages: dict[int, int] = {}

    def position() -> int:
        at = reader.pos
        value = reader.zigzag()
        if value:  # Arrow writes ColumnChunk.file_offset (deprecated) as 0
            cuts.append((at, reader.pos, value))
        return value

    last = 0
    while (field := reader.header(last)) is not None:
        last, typ = field
        if last in _ELSEWHERE:
            raise T.ThriftError(f"a row group with a {_ELSEWHERE[last]} cannot be moved")
        if last == _CHUNK_OFFSET:
            position()
        elif last == _CHUNK_META:
            inner = 0
            while (meta := reader.header(inner)) is not None:
                inner, kind = meta
                if inner in _META_OFFSETS:
                    pages[inner] = position()
                elif inner in (_UNCOMPRESSED, _COMPRESSED):
                    sizes[inner] = reader.zigzag()
                elif inner == _BLOOM_FILTER:
                    raise T.ThriftError("a row group with a bloom filter cannot be moved")
                else:
                    reader.skip(kind)
        else:
            reader.skip(typ)
    start = pages.get(_DICTIONARY_PAGE) or pages[_DATA_PAGE]
    parts, at = [], begin
    for cut_start, cut_end, _ in cuts:
        parts.append(bytes(buf[at:cut_start]))
        at = cut_end
    parts.append(bytes(buf[at : reader.pos]))
    spliced = T.Spliced(parts, [value - start for _, _, value in cuts])
    return Chunk(buf[start : start + sizes[_COMPRESSED]], spliced, sizes[_UNCOMPRESSED])


def _piece(group: T.Fields, chunks: list[Chunk], rows: int) -> Piece:
    """A row group of ``chunks`` in their order, its metadata ``group``'s with their sizes and places."""
    metas, pos = [], 0
    for chunk in chunks:
        metas.append(T.Spliced(chunk.meta.parts, chunk.meta.offsets, pos))
        pos += len(chunk.data)
    sizes = {_COLUMNS: T.List(T.STRUCT, metas), _BYTES: sum(c.size for c in chunks), _GROUP_SIZE: pos}
    for f in group:
        if f[0] in sizes:
            f[2] = sizes[f[0]]
        elif f[0] == _GROUP_OFFSET:
            f[2] = T.Hole(0)  # the first chunk's first byte
    parts, offsets = T.encode_parts(group)
    return Piece(parts, offsets, rows, pos, b"".join(c.data for c in chunks))


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
