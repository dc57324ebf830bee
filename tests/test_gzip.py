"""gzip input reads the same with ISA-L (the default where its wheel exists) and with zlib."""

from __future__ import annotations

import zlib
from pathlib import Path

import pyarrow as pa
import pytest

from traceconv.errors import InputError
from traceconv.readers.pytorch import gunzip
from traceconv.readers.pytorch.reader import PytorchReader

from .conftest import fixture

TRACE = fixture("pytorch/h200/train_buggy.pt.trace.json.gz")


def _read(path: Path, salvage: bool = False) -> tuple[pa.Table, list[str]]:
    reader = PytorchReader(path, salvage=salvage, workers=0)
    return pa.concat_tables(reader.tables()), reader.info.notes


@pytest.fixture(params=["default", "zlib"])
def inflate(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "zlib":
        monkeypatch.setattr(gunzip, "_inflate", zlib)
    return str(request.param)


def test_whole_and_cut_short(inflate: str, tmp_path: Path) -> None:
    table, _ = _read(TRACE)
    assert table.num_rows > 10_000
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(TRACE.read_bytes()[: TRACE.stat().st_size * 2 // 3])
    with pytest.raises(InputError, match="gzip stream is damaged or cut short"):
        _read(cut)
    salvaged, notes = _read(cut, salvage=True)
    assert 0 < salvaged.num_rows < table.num_rows
    assert any("cut short" in n for n in notes)


def test_isal_and_zlib_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    default, _ = _read(TRACE)
    monkeypatch.setattr(gunzip, "_inflate", zlib)
    plain, _ = _read(TRACE)
    assert default.equals(plain)
