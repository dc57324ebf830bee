"""Row groups encoded apart, the chunks of their uniform columns (one value in every row, or none)
reused (how an Nsight Systems export is written): the bytes that one writer writes from the same tables."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from traceconv import parquet_join as J
from traceconv import schema as S
from traceconv import thrift as T
from traceconv import writing as tio
from traceconv.readers import open_reader
from traceconv.readers.nsys import batches
from traceconv.readers.nsys.reader import NsysReader

from .conftest import fixture, param_path, real_files

EXPORTS = real_files("nsys", ("*.sqlite",))
SMALL_BATCH = 2000  # rows a batch: even small exports make many batches of the same size


def _written(
    reader: NsysReader, tables: list[pa.Table], out: Path, sparse: bool, monkeypatch: pytest.MonkeyPatch
) -> bytes:
    monkeypatch.setattr(NsysReader, "SPARSE_GROUPS", sparse)
    tio.write_tables(reader, tables, out)
    return out.read_bytes()


@pytest.mark.parametrize("path", EXPORTS, ids=lambda p: param_path(p).name[:60])
def test_uniform_chunks_reused_give_one_writers_bytes(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(batches, "BATCH_ROWS", SMALL_BATCH)
    monkeypatch.setattr(batches, "MIN_BATCH_ROWS", SMALL_BATCH // 4)
    reader = open_reader(param_path(path))
    assert isinstance(reader, NsysReader) and reader.SPARSE_GROUPS
    tables = tio.rewound(lambda: list(reader.tables()))
    reused: list[str] = []
    find = J.UniformChunks.find

    def found(self: J.UniformChunks, n: int, keys: list[tuple[pa.Field, object]]) -> list[J.Chunk | None]:
        got = find(self, n, keys)
        reused.extend(f.name for (f, _), chunk in zip(keys, got, strict=True) if chunk is not None)
        return got

    monkeypatch.setattr(J.UniformChunks, "find", found)
    one = _written(reader, tables, tmp_path / "one.parquet", False, monkeypatch)
    assert not reused  # one writer: nothing taken apart
    joined = _written(reader, tables, tmp_path / "joined.parquet", True, monkeypatch)
    assert joined == one
    sizes = [t.num_rows for t in tables]
    if any(sizes.count(n) > 1 for n in sizes):  # a size that comes again: its uniform chunks come from the cache
        assert "source" in reused  # one value in every row of every table
    footer = one[-8 - int.from_bytes(one[-8:-4], "little") : -8]
    skipped = T.Reader(footer)
    skipped.skip(T.STRUCT)
    assert skipped.pos == len(footer)  # skipping a struct ends where decoding it does


def test_a_null_dictionary_column_with_values_is_not_taken_for_a_null_column(tmp_path: Path) -> None:
    """Hand-made from a real export's rows (no export has both in row groups of one size): a
    dictionary column whose rows are all null but whose dictionary holds values writes that
    dictionary; its chunk is not the one of a column without a dictionary."""
    reader = open_reader(fixture("nsys/h200/graph_node.sqlite"))
    table = next(t for t in tio.rewound(lambda: list(reader.tables())) if t.num_rows > 10)
    n = table.num_rows
    i = table.schema.get_field_index("launch_name")
    with_values = pa.DictionaryArray.from_arrays(pa.nulls(n, pa.int32()), pa.array(["kernel"], pa.string()))
    empty = pa.DictionaryArray.from_arrays(pa.nulls(n, pa.int32()), pa.array([], pa.string()))
    tables = [table.set_column(i, S.SCHEMA.field(i), column) for column in (with_values, empty) * 2]  # one size
    assert J._uniform_key(tables[0].column(i), n) != J._uniform_key(tables[1].column(i), n)
    joined = _joined(tables, tmp_path)
    assert joined == _one_writer(tables)
    written = pq.ParquetFile(pa.BufferReader(joined))
    dictionaries = [written.read_row_group(g).column("launch_name").chunk(0).dictionary.to_pylist() for g in range(4)]
    assert dictionaries == [["kernel"], [], ["kernel"], []]


def _one_writer(tables: list[pa.Table]) -> bytes:
    sink = pa.BufferOutputStream()
    writer = tio.new_writer(sink)
    for t in tables:
        writer.write_table(t, row_group_size=t.num_rows)
    writer.close()
    return sink.getvalue().to_pybytes()


def _joined(tables: list[pa.Table], tmp_path: Path) -> bytes:
    uniform = J.UniformChunks()
    with open(tmp_path / "joined.parquet", "wb", buffering=0) as out:
        joiner = J.Joiner(out, tio.new_writer)
        for t in tables:
            joiner.add(J.encode(t, tio.new_writer, uniform))
        joiner.finish({})
    return (tmp_path / "joined.parquet").read_bytes()


def test_uniform_columns_of_other_values_or_dictionaries_are_not_taken_for_each_other(tmp_path: Path) -> None:
    """Hand-made from a real export's rows: row groups of one size whose uniform columns differ
    only in their value, or in a dictionary entry no row uses (which is written all the same),
    each get their own chunk; a row group whose every column is uniform and known is joined too."""
    reader = open_reader(fixture("nsys/h200/graph_node.sqlite"))
    table = next(t for t in tio.rewound(lambda: list(reader.tables())) if t.num_rows > 10)
    n = table.num_rows
    kind, pid = table.schema.get_field_index("kind"), table.schema.get_field_index("pid")

    def with_kind(dictionary: list[str], value: int) -> pa.Table:
        indices = pa.array([0] * n, pa.int32())
        kinds = pa.DictionaryArray.from_arrays(indices, pa.array(dictionary, pa.string()))
        return table.set_column(kind, S.SCHEMA.field(kind), kinds).set_column(
            pid, S.SCHEMA.field(pid), pa.array([value] * n, pa.int64())
        )

    tables = [with_kind(["kernel"], 7), with_kind(["kernel", "memcpy"], 7), with_kind(["kernel"], 8)]
    keys = [J._uniform_key(t.column(kind), n) for t in tables]
    assert keys[0] is not None and len({*keys}) == 2  # uniform; the unused entry makes another key
    assert J._uniform_key(tables[0].column(pid), n) != J._uniform_key(tables[2].column(pid), n)
    every_row_alike = table.take([0] * n)  # every column uniform: the second and third are all known
    for i, f in enumerate(table.schema):
        if not (pa.types.is_integer(f.type) or pa.types.is_dictionary(f.type)):  # texts, reals: none kept
            every_row_alike = every_row_alike.set_column(i, f, pa.nulls(n, f.type))
    assert all(J._uniform_key(c, n) is not None for c in every_row_alike.columns)
    tables += [every_row_alike] * 3 + [tables[0]]
    assert _joined(tables, tmp_path) == _one_writer(tables)


def test_a_truncated_footer_is_a_thrift_error() -> None:
    reader = open_reader(fixture("nsys/h200/graph_node.sqlite"))
    table = tio.rewound(lambda: list(reader.tables()))[0]
    buf = J._one_group(table, tio.new_writer)
    _, chunks = J._chunks(buf)
    assert len(chunks) == table.num_columns
    cut = bytes(buf[:-40]) + bytes(buf[-8:])
    with pytest.raises(T.ThriftError):
        J._chunks(cut)


def test_skipping_a_value_of_each_type_ends_where_decoding_it_does() -> None:
    """Hand-made: a struct with a field of every compact-protocol type a footer may hold, field ids
    in both header forms, a long list; skipping it lands where decoding it does."""
    inner = [[1, T.I32, -7], [40, T.BINARY, b"x" * 200]]  # id 40: the long form of a field header
    fields = [
        [1, T.BOOL_TRUE, True],
        [2, T.BYTE, -3],
        [3, T.I16, 300],
        [4, T.I64, -(2**40)],
        [5, T.DOUBLE, 2.5],
        [6, T.BINARY, b"abc"],
        [7, T.LIST, T.List(T.I32, list(range(20)))],  # 20 elements: the long form of a list header
        [8, T.LIST, T.List(T.BOOL_TRUE, [True, False, True])],
        [9, T.LIST, T.List(T.STRUCT, [inner, inner])],
        [10, T.STRUCT, inner],
        [11, T.BOOL_FALSE, False],
    ]
    data = T.encode(fields) + b"tail"
    decoded = T.Reader(data)
    assert decoded.fields() == fields
    skipped = T.Reader(data)
    skipped.skip(T.STRUCT)
    assert skipped.pos == decoded.pos == len(data) - 4
    with pytest.raises(T.ThriftError):
        T.Reader(data[:-30]).skip(T.STRUCT)
