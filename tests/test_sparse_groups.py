"""Row groups encoded apart, their all-null columns' chunks reused (how an Nsight Systems export is
written): the bytes that one writer writes from the same tables."""

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
def test_null_chunks_reused_give_one_writers_bytes(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batches, "BATCH_ROWS", SMALL_BATCH)
    monkeypatch.setattr(batches, "MIN_BATCH_ROWS", SMALL_BATCH // 4)
    reader = open_reader(param_path(path))
    assert isinstance(reader, NsysReader) and reader.SPARSE_GROUPS
    tables = tio.rewound(lambda: list(reader.tables()))
    reused = []
    chunks = J.NullChunks.chunks
    monkeypatch.setattr(J.NullChunks, "chunks", lambda self, n, fields: reused.append(n) or chunks(self, n, fields))
    one = _written(reader, tables, tmp_path / "one.parquet", False, monkeypatch)
    assert not reused  # one writer: nothing taken apart
    joined = _written(reader, tables, tmp_path / "joined.parquet", True, monkeypatch)
    assert joined == one
    sizes = [t.num_rows for t in tables]
    if any(sizes.count(n) > 1 for n in sizes):  # a size that comes again: its null chunks come from the cache
        assert reused
    footer = one[-8 - int.from_bytes(one[-8:-4], "little") : -8]
    skipped = T.Reader(footer)
    skipped.skip(T.STRUCT)
    assert skipped.pos == len(footer)  # skipping a struct ends where decoding it does


def test_a_null_dictionary_column_with_values_is_encoded_not_reused(tmp_path: Path) -> None:
    """Hand-made from a real export's rows (no export has it): a dictionary column whose rows are all
    null but whose dictionary holds values writes that dictionary; its chunk is not a null chunk."""
    reader = open_reader(fixture("nsys/h200/graph_node.sqlite"))
    table = next(t for t in tio.rewound(lambda: list(reader.tables())) if t.num_rows > 10)
    n = table.num_rows
    i = table.schema.get_field_index("launch_name")
    odd = pa.DictionaryArray.from_arrays(pa.nulls(n, pa.int32()), pa.array(["kernel"], pa.string()))
    tables = [table.set_column(i, S.SCHEMA.field(i), odd) for _ in range(3)]  # one size, three times
    sink = pa.BufferOutputStream()
    writer = tio.new_writer(sink)
    for t in tables:
        writer.write_table(t, row_group_size=n)
    writer.close()
    one = sink.getvalue().to_pybytes()
    nulls = J.NullChunks(tio.new_writer)
    with open(tmp_path / "joined.parquet", "xb", buffering=0) as out:
        joiner = J.Joiner(out, tio.new_writer)
        for t in tables:
            joiner.add(J.encode(t, tio.new_writer, nulls))
        joiner.finish({})
    joined = (tmp_path / "joined.parquet").read_bytes()
    assert joined == one
    assert pq.read_table(pa.BufferReader(joined)).column("launch_name").chunk(0).dictionary.to_pylist() == ["kernel"]


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
