"""Pass 2 in worker processes: row groups encoded apart and joined give the bytes of one writer."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest

from traceconv import parquet_join as J
from traceconv import thrift as T
from traceconv import writing as tio
from traceconv.readers.pytorch import reader as R
from traceconv.readers.pytorch.links import LinkIndex

from .conftest import param_path, real_files
from .fixtures import sweep_chunk

SMALL = 32 << 10  # small chunks and row groups, so that even small real traces make many of each
GROUP_ROWS = 1500
TRACES = real_files("pytorch", ("*.json", "*.json.gz"))
PARALLEL = [  # the traces large enough for workers at SMALL chunks (a .gz counts as 8x its size)
    p
    for p in TRACES
    if param_path(p).stat().st_size * (8 if param_path(p).suffix == ".gz" else 1) > R.PARALLEL_CHUNKS * SMALL
]


@pytest.fixture
def small_groups(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setattr(R, "ROW_GROUP_ROWS", GROUP_ROWS)  # forked workers inherit it
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    return temp


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name[:60])
def test_pieces_joined_are_one_writers_file(path: Path, small_groups: Path, tmp_path: Path) -> None:
    reader = R.PytorchReader(path, workers=0)
    tables = list(reader.tables())
    tio.write_tables(reader, tables, tmp_path / "one.parquet")
    pieces = [(J.encode(t, tio.new_writer), None, tio.tally(t)) for t in tables]
    tio.write_pieces(reader, pieces, tmp_path / "joined.parquet")
    one = (tmp_path / "one.parquet").read_bytes()
    assert (tmp_path / "joined.parquet").read_bytes() == one
    footer = one[-8 - int.from_bytes(one[-8:-4], "little") : -8]
    assert T.encode(T.decode(footer)) == footer  # the codec writes back what it read


@pytest.mark.parametrize("path", PARALLEL, ids=lambda p: p.name[:60])
def test_output_bytes_do_not_depend_on_the_workers(path: Path, small_groups: Path, tmp_path: Path) -> None:
    outputs = {}
    for workers in (0, 1, 3):  # 0 and 1: linked here, encoded by one writer; 3: pass 2 in workers (2 takes its path)
        out = tmp_path / f"w{workers}.parquet"
        tio.convert(path, out, workers=workers, chunk_size=sweep_chunk(path, SMALL))
        outputs[workers] = out.read_bytes()
    assert outputs[0][:4] == J.MAGIC
    assert outputs[1] == outputs[0]
    assert outputs[3] == outputs[0]
    assert not os.listdir(small_groups)  # every worker's temporary file is gone


def test_the_main_process_and_the_workers_share_the_row_groups(
    small_groups: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from traceconv.readers.pytorch import pass2

    seen: list[int] = []
    real_map = pass2.GroupPool.map

    def spy(self: pass2.GroupPool, count: int):  # type: ignore[no-untyped-def]
        yield from real_map(self, count)
        seen.extend([count, self.converted_here])

    monkeypatch.setattr(pass2.GroupPool, "map", spy)
    path = param_path(PARALLEL[-1])
    tio.convert(path, tmp_path / "a.parquet", workers=R.PASS2_WORKERS, chunk_size=SMALL)
    count, here = seen
    assert count > 4 and 0 <= here < count  # the workers took some row groups


def test_an_error_in_a_worker_is_raised_as_in_one_process(
    small_groups: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = LinkIndex.resolve

    def broken(self: LinkIndex, table: pa.Table, base_ns: int) -> pa.Table:
        if table.num_rows and table["event_id"][0].as_py() > 2 * GROUP_ROWS:
            raise ValueError("broken on purpose")
        return real(self, table, base_ns)

    monkeypatch.setattr(LinkIndex, "resolve", broken)
    out = tmp_path / "x.parquet"
    with pytest.raises(ValueError, match="broken on purpose"):
        tio.convert(param_path(PARALLEL[-1]), out, workers=2, chunk_size=SMALL)
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert not os.listdir(small_groups)


def _punches_holes(folder: str) -> bool:
    """Whether the file system of ``folder`` frees a file's blocks by fallocate's PUNCH_HOLE."""
    from traceconv.readers.pytorch.spill import punch_hole

    with tempfile.NamedTemporaryFile(dir=folder) as fh:
        fh.write(b"x" * (1 << 20))
        fh.flush()
        os.fsync(fh.fileno())
        before = os.stat(fh.name).st_blocks
        punch_hole(fh.fileno(), 0, 1 << 20)
        return os.stat(fh.name).st_blocks < before


def test_a_released_table_leaves_its_file_and_the_tables_beside_it_stay(small_groups: Path) -> None:
    """Once pass 2 has converted a row group for good, its tables' blocks go from the spill file; the
    tables before and after it, which share its first and last blocks, read back whole."""
    from traceconv.readers.pytorch.spill import SegmentFile

    if not _punches_holes(str(small_groups)):
        pytest.skip("the temporary folder's file system cannot punch holes (the file is removed whole)")
    reader = R.PytorchReader(param_path(PARALLEL[-1]), workers=0)
    table = pa.concat_tables(list(reader.tables())).combine_chunks()
    third = table.num_rows // 3
    parts = [table.slice(0, third), table.slice(third, third), table.slice(2 * third)]
    file = SegmentFile()
    try:
        at = [file.write(part) for part in parts]
        file.close_writer()
        block = os.stat(file.path).st_blksize
        assert at[1][1] > 4 * block  # a table of several blocks
        before = os.stat(file.path).st_blocks * 512
        file.release(*at[1])
        freed = before - os.stat(file.path).st_blocks * 512
        assert at[1][1] - 2 * block <= freed <= at[1][1]  # the middle table's blocks, not its neighbours'
        assert os.stat(file.path).st_size == sum(length for _, length in at)  # the same size: a hole
        assert file.read(*at[0]).equals(parts[0]) and file.read(*at[2]).equals(parts[2])
    finally:
        file.remove()


def test_every_spilled_table_is_released_once_its_row_group_is_answered(
    small_groups: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each pass-1 table of the spill is released exactly once, by the process that converted its row
    group (the workers, forked with this log, and this process for the row groups it takes itself)."""
    from traceconv.readers.pytorch import spill

    log = tmp_path / "released"
    real_release, real_groups = spill.SegmentFile.release, spill.Spill.groups
    groups: list[range] = []

    def logged(self: spill.SegmentFile, pos: int, length: int) -> None:
        with open(log, "a") as fh:
            fh.write(f"{self.path} {pos}\n")
        real_release(self, pos, length)

    def seen(self: spill.Spill, rows: int) -> list[range]:
        groups.extend(real_groups(self, rows))
        return groups

    monkeypatch.setattr(spill.SegmentFile, "release", logged)
    monkeypatch.setattr(spill.Spill, "groups", seen)
    path = param_path(PARALLEL[-1])
    tio.convert(path, tmp_path / "a.parquet", workers=3, chunk_size=sweep_chunk(path, SMALL))
    released = log.read_text().splitlines()
    assert len(groups) > 4
    assert len(released) == len(set(released)) == sum(len(g) for g in groups)
