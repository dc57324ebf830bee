"""Pass 1 in worker processes gives exactly what one process gives, and falls back where it must."""

from __future__ import annotations

import gzip
import os
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import traceconv
from traceconv import schema as S
from traceconv.readers.pytorch.chunker import EventChunks
from traceconv.readers.pytorch.reader import PytorchReader

from .conftest import fixture, param_path, real_files
from .fixtures import sweep_chunk

SMALL = 32 << 10  # small chunks, so that even the small real traces are cut into many
# the traces large enough for the workers (a .gz counts as 8x its size) at SMALL chunks
TRACES = [
    p
    for p in real_files("pytorch", ("*.json", "*.json.gz"))
    if param_path(p).stat().st_size * (8 if param_path(p).suffix == ".gz" else 1) > 6 * SMALL
]


def _read(path: Path, workers: int, chunk: int = SMALL) -> tuple[pa.Table, PytorchReader]:
    reader = PytorchReader(path, chunk_size=chunk, workers=workers)
    return pa.concat_tables(reader.tables()), reader


def _assert_same(a: pa.Table, b: pa.Table) -> None:
    assert a.num_rows == b.num_rows
    for name in S.NAMES:
        x, y = a[name], b[name]
        if pa.types.is_dictionary(x.type):  # the same values; dictionaries may be ordered differently
            x, y = x.cast(pa.string()), y.cast(pa.string())
        assert x.equals(y), name


@pytest.mark.parametrize("workers", [1, 2])  # 1: the default on two cores (the main process converts too)
@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name[:60])
def test_workers_give_the_single_process_result(
    path: Path, workers: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    one, single = _read(path, workers=0, chunk=sweep_chunk(path, SMALL))
    two, parallel = _read(path, workers=workers, chunk=sweep_chunk(path, SMALL))
    assert single.workers_used == 0 and parallel.workers_used == workers
    _assert_same(one, two)
    assert parallel.info.notes == single.info.notes
    assert parallel.info.counters == single.info.counters
    assert parallel.info.metadata == single.info.metadata
    assert not os.listdir(tmp_path)  # the workers' temporary files are gone


def _cuts(path: Path, chunk: int, positioned: bool) -> list[tuple[int, int, bytes]]:
    """Each chunk's (offset, length, first and last bytes) as the chunker hands it out."""
    seen: list[tuple[int, int, bytes]] = []

    def decode(data: Any) -> list[None]:
        text = bytes(data)  # a Span reads its bytes where it lies
        seen.append((chunks.offset, len(data), text[:40] + text[-40:]))
        return []

    chunks = EventChunks(path, decode, None, chunk, positioned=positioned)
    for _ in chunks:
        pass
    return seen


PLAIN = [p for p in real_files("pytorch", ("*.json",)) if param_path(p).stat().st_size > 4 * SMALL]


@pytest.mark.parametrize("chunk", [SMALL, SMALL + 4099])
@pytest.mark.parametrize("path", PLAIN, ids=lambda p: p.name[:60])
def test_positioned_cuts_are_the_reading_cuts(path: Path, chunk: int) -> None:
    """Pass 1's main process only looks for the cuts (its workers read the chunks): the chunks
    are those that reading the trace through gives, at every offset."""
    reading = _cuts(path, chunk, positioned=False)
    assert len(reading) > 3
    assert _cuts(path, chunk, positioned=True) == reading


def test_positioned_cuts_find_a_cut_beyond_the_first_window(tmp_path: Path) -> None:
    """Hand-made: events of 10 kB (a long name), larger than the bytes first read at a cut, and
    long runs of spaces between them, so that some cuts lie across a window's end."""
    gap = b"}" + b" " * 1500 + b"," + b" " * 1500 + b"{"
    events = gap.join(b'"ph": "X", "name": "%s", "ts": %d, "dur": 1' % (b"n" * (9_000 + 37 * i), i) for i in range(60))
    events = b"{" + events + b"}"
    path = tmp_path / "long_events.json"
    path.write_bytes(b'{"traceEvents": [\n' + events + b"\n]}")
    reading = _cuts(path, 32 << 10, positioned=False)
    assert len(reading) > 3
    assert _cuts(path, 32 << 10, positioned=True) == reading


def test_one_worker_and_this_process_share_the_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default on two cores: one worker, and the main process converts chunks while the
    worker's queue is full. Chunks done on either side come together as one process's."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    path = fixture("pytorch/h200/train_buggy.pt.trace.json.gz")
    one, single = _read(path, workers=0)
    two, parallel = _read(path, workers=1)
    assert parallel.workers_used == 1
    chunks = len(list(EventChunks(path, lambda chunk: [chunk], None, SMALL)))
    assert 0 < parallel.chunks_here < chunks - 1  # both sides converted some (the worker at least two)
    _assert_same(one, two)
    assert parallel.info.notes == single.info.notes
    assert parallel.info.counters == single.info.counters
    assert not os.listdir(tmp_path)


def test_workers_start_as_the_chunks_come(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers are forked as chunks and row groups need them: a trace of fewer chunks than workers
    forks no more pass-1 workers than it has chunks, nor pass-2 workers than row groups; the
    result is the single process's."""
    from traceconv.readers.pytorch import pass2, reader, workers

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    started = {"pass1": 0, "pass2": 0}

    def counted(cls: Any, key: str) -> None:
        real = cls._start

        def start(self: Any) -> int:
            started[key] += 1
            return int(real(self))

        monkeypatch.setattr(cls, "_start", start)

    counted(workers.ChunkPool, "pass1")
    counted(pass2.GroupPool, "pass2")
    monkeypatch.setattr(reader, "ROW_GROUP_ROWS", 2000)  # several row groups from a small trace
    path = fixture("pytorch/h200/train_buggy.pt.trace.json.gz")
    chunk = 128 << 10
    chunks = len(list(EventChunks(path, lambda c: [c], None, chunk)))
    out = tmp_path / "out"
    one = traceconv.convert(path, out / "one.parquet", workers=0, chunk_size=chunk)
    many = traceconv.convert(path, out / "many.parquet", workers=chunks + 4, chunk_size=chunk)
    assert 1 <= started["pass1"] <= chunks and 1 <= started["pass2"] <= -(-one.rows // 2000)
    assert (out / "one.parquet").read_bytes() == (out / "many.parquet").read_bytes() and many.rows == one.rows
    assert os.listdir(tmp_path) == ["out"]


def _with_damage(tmp_path: Path, old: bytes, new: bytes) -> Path:
    text = gzip.decompress((fixture("pytorch/h200/train_buggy.pt.trace.json.gz")).read_bytes())
    at = text.index(old, len(text) // 2)  # in a later chunk, after workers have done several
    out = tmp_path / "damaged.json"
    out.write_bytes(text[:at] + new + text[at + len(old) :])
    return out


@pytest.mark.parametrize(
    ("old", "new", "note"),
    [
        (b'"name": "aten::', b'"name": "\taten::', "tab"),  # raw tab in a name, as some Kineto versions wrote
        (b'"name": "aten::', b'"name": "a"ten::', "quotes"),  # unescaped quote in a name
    ],
)
def test_repairs_are_made_by_the_workers_as_by_one_process(tmp_path: Path, old: bytes, new: bytes, note: str) -> None:
    path = _with_damage(tmp_path, old, new)
    one, single = _read(path, workers=0)
    two, parallel = _read(path, workers=2)
    assert parallel.workers_used == 2
    assert any(note in n for n in single.info.notes)
    _assert_same(one, two)
    assert parallel.info.notes == single.info.notes
    assert parallel.info.counters == single.info.counters


def test_trailing_comma_note_survives_the_workers(tmp_path: Path) -> None:
    text = gzip.decompress((fixture("pytorch/h200/train_buggy.pt.trace.json.gz")).read_bytes())
    end = text.rindex(b"}", 0, text.rindex(b"]")) + 1  # the last event's closing brace
    path = tmp_path / "comma.json"
    path.write_bytes(text[:end] + b"," + text[end:])
    one, single = _read(path, workers=0)
    two, parallel = _read(path, workers=2)
    assert parallel.workers_used == 2
    assert any("trailing commas" in n for n in single.info.notes)
    _assert_same(one, two)
    assert parallel.info.notes == single.info.notes


def test_a_cut_inside_a_string_falls_back_to_one_process(tmp_path: Path) -> None:
    # Names holding the event-boundary pattern: some chunks end inside a string, which only
    # the one-process path (decoding to confirm each cut) can move past.
    text = gzip.decompress((fixture("pytorch/h200/train_buggy.pt.trace.json.gz")).read_bytes())
    half = len(text) // 2
    path = tmp_path / "trap.json"
    path.write_bytes(text[:half] + text[half:].replace(b'"name": "aten::', b'"name": "},  {aten::'))
    one, single = _read(path, workers=0)
    two, parallel = _read(path, workers=2)
    assert parallel.workers_used == 0
    assert one["name"].cast(pa.string()).to_pylist().count("},  {aten::mm") > 0
    _assert_same(one, two)
    assert parallel.info.notes == single.info.notes


def test_workers_exit_when_the_main_side_goes_away() -> None:
    """A worker must not wait forever on a pipe whose main end another worker inherited."""
    from traceconv.readers.pytorch.reader import StrictDecoder
    from traceconv.readers.pytorch.workers import ChunkPool

    with tempfile.TemporaryDirectory() as tmp:
        pool = ChunkPool([os.path.join(tmp, "a"), os.path.join(tmp, "b")], StrictDecoder())
        procs = list(pool._procs)
        for conn in pool._conns:  # as if the main process died: no goodbye, just closed pipes
            conn.close()
        for proc in procs:
            proc.join(timeout=10)
        assert not any(proc.is_alive() for proc in procs)
        pool._conns, pool._procs = [], []
