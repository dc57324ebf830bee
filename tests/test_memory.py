"""What keeps a conversion's memory small: the allocator the CLI picks, the lazy API, the row groups."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import tracemalloc
from functools import partial
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import traceconv
from traceconv.errors import TraceconvError
from traceconv.readers.pytorch import reader as pytorch
from traceconv.readers.pytorch.chunker import EventChunks
from traceconv.readers.pytorch.spill import SegmentFile, row_groups
from traceconv.writing import write_tables

from .conftest import fixture

TRACE = fixture("pytorch/h200/train_buggy.pt.trace.json.gz")


def _after_cli(tmp_path: Path, env: dict[str, str], unset: str, printed: str) -> str:
    """What ``printed`` (Python) says after a CLI conversion in a fresh process, with the
    environment variable ``unset`` taken out of this one's and ``env`` added (the CLI
    process imports nothing before main)."""
    code = (
        "import os, sys; from traceconv.cli import main\n"
        "assert 'pyarrow' not in sys.modules, 'pyarrow was imported before the CLI chose its allocator'\n"
        f"main(['ingest', {str(TRACE)!r}, '-o', {str(tmp_path / 'x.parquet')!r}, '--workers', '0'], "
        "standalone_mode=False)\n"
        f"import numpy, pyarrow as pa; print({printed})"
    )
    clean = {k: v for k, v in os.environ.items() if k != unset}
    proc = subprocess.run([sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


def _pool_after_cli(tmp_path: Path, env: dict[str, str]) -> str:
    """The Arrow memory pool a CLI conversion ran with."""
    return _after_cli(tmp_path, env, "ARROW_DEFAULT_MEMORY_POOL", "pa.default_memory_pool().backend_name")


def test_the_cli_converts_with_the_c_allocator(tmp_path: Path) -> None:
    assert _pool_after_cli(tmp_path, {}) == "system"


def test_the_users_choice_of_arrow_pool_wins(tmp_path: Path) -> None:
    if "mimalloc" not in pa.supported_memory_backends():
        pytest.skip("this pyarrow has no mimalloc")
    assert _pool_after_cli(tmp_path, {"ARROW_DEFAULT_MEMORY_POOL": "mimalloc"}) == "mimalloc"


def test_the_cli_starts_no_blas_threads_unless_asked(tmp_path: Path) -> None:
    printed = "os.environ.get('OPENBLAS_NUM_THREADS')"
    assert _after_cli(tmp_path, {}, "OPENBLAS_NUM_THREADS", printed) == "1"
    assert _after_cli(tmp_path, {"OPENBLAS_NUM_THREADS": "3"}, "OPENBLAS_NUM_THREADS", printed) == "3"


def test_importing_the_library_leaves_the_allocator_alone() -> None:
    code = (
        "import os, traceconv; traceconv.read_unified; import traceconv.cli\n"
        "assert 'ARROW_DEFAULT_MEMORY_POOL' not in os.environ and 'OPENBLAS_NUM_THREADS' not in os.environ"
    )
    clean = {k: v for k, v in os.environ.items() if k not in ("ARROW_DEFAULT_MEMORY_POOL", "OPENBLAS_NUM_THREADS")}
    subprocess.run([sys.executable, "-c", code], env=clean, check=True)


def test_the_api_is_imported_on_first_use() -> None:
    assert traceconv.convert.__module__ == "traceconv.writing"
    assert traceconv.SCHEMA.names[0] and traceconv.SCHEMA_VERSION
    assert {"convert", "read_unified", "SCHEMA"} <= set(dir(traceconv))
    with pytest.raises(AttributeError, match="no attribute 'nonesuch'"):
        traceconv.nonesuch  # noqa: B018


def test_no_chunk_is_much_larger_than_the_target(tmp_path: Path) -> None:
    """The read-ahead leaves up to two chunks and a block at the end of the input; decoded at
    once they were the largest chunk of every trace (a peak of memory where the rest needs none)."""
    plain = tmp_path / "t.json"
    plain.write_bytes(gzip.decompress(TRACE.read_bytes()))
    event = 8 << 10  # a margin for the event a cut waits for (Kineto's largest here are ~3 KB)
    for size in (200 << 10, 400 << 10):  # sizes where the end of the file left ~1.8 chunks
        for path in (TRACE, plain):
            chunks = [len(c[0]) for c in EventChunks(path, lambda chunk: [chunk], None, size)]
            assert sum(chunks) > 0.99 * plain.stat().st_size
            assert max(chunks) <= 1.5 * size + event, (path.name, size, max(chunks))


def test_spilled_tables_are_read_back_without_a_copy_in_the_heap(tmp_path: Path) -> None:
    """Pass 2 maps each spilled table from its file: copied, the tables in flight (a few MiB
    each) fragmented the heap and the process grew as pass 2 went on."""
    table = pa.table({"args": pa.array(["x" * 200] * 20_000), "i": pa.array(range(20_000), pa.int64())})
    segments = SegmentFile(str(tmp_path / "s.arrows"))
    (tmp_path / "s.arrows").touch()
    where = [segments.write(table.slice(0, 7)), segments.write(table)]
    tracemalloc.start()
    try:
        back = segments.read(*where[1])
        copied, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert back.equals(table) and segments.read(*where[0]).equals(table.slice(0, 7))
    assert copied < table.nbytes // 20, copied
    del back
    os.truncate(tmp_path / "s.arrows", where[1][0] + 100)  # cut short by someone else
    with pytest.raises(TraceconvError, match="cut short"):
        segments.read(*where[1])  # an error, not a SIGBUS from a mapping past the end
    segments.remove()
    assert not (tmp_path / "s.arrows").exists()


def _tables(*rows: int) -> list[pa.Table]:
    return [pa.table({"i": pa.array(range(n), pa.int64())}) for n in rows]


def test_row_groups_gather_consecutive_tables_until_enough_rows() -> None:
    groups = list(row_groups(_tables(3, 4, 10, 1, 1, 2), 5))
    assert [[t.num_rows for t in g] for g in groups] == [[3, 4], [10], [1, 1, 2]]
    assert list(row_groups([], 5)) == []


def test_small_chunks_are_written_as_large_row_groups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pytorch, "ROW_GROUP_ROWS", 4000)
    reader = pytorch.PytorchReader(TRACE, chunk_size=64 << 10, workers=0)  # ~30 chunks of ~500 events
    out = tmp_path / "t.parquet"
    write_tables(reader, reader.tables(), out)
    meta = pq.read_metadata(out)
    sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    assert sum(sizes) == 16079
    assert all(n >= 4000 for n in sizes[:-1]) and 1 < len(sizes) <= 16079 // 4000 + 1
    whole = pa.concat_tables(pytorch.PytorchReader(TRACE, workers=0).tables())
    written = pq.read_table(out)
    for name in ("event_id", "op_event_id", "launch_event_id", "queue_ns", "name", "thread_name"):
        a, b = written[name], whole[name]
        if pa.types.is_dictionary(a.type):  # each row group has a dictionary of its own
            a, b = a.cast(pa.string()), b.cast(pa.string())
        assert a.equals(b), name


def test_parquet_pages_are_small(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """1 MiB pages (pyarrow's default) cost the writer thread ~6 MiB more for the args text."""
    import pyarrow._parquet as _pq

    import traceconv.writing as tio

    seen: dict[str, object] = {}
    real = _pq.ParquetWriter

    def recording(*args: object, **kwargs: object) -> object:
        seen.update(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(_pq, "ParquetWriter", recording)
    tio.convert(TRACE, tmp_path / "t.parquet", workers=0)
    assert seen["data_page_size"] == tio.DATA_PAGE <= 256 << 10
    assert pq.read_table(tmp_path / "t.parquet").num_rows == 16079


def test_writer_is_pyarrow_parquets_without_its_filesystems(tmp_path: Path) -> None:
    """The writer class made directly writes the very bytes pyarrow.parquet's wrapper writes, and
    a conversion never imports pyarrow.fs (S3, GCS, Azure, HDFS, OpenSSL: ~7.5 MiB of RSS)."""
    import traceconv.writing as tio
    from traceconv import schema as S

    table = pa.concat_tables(pytorch.PytorchReader(TRACE, workers=0).tables()).slice(0, 5000)
    options = {"compression": tio.COMPRESSION, "compression_level": tio.COMPRESSION_LEVEL}
    options |= {"use_dictionary": tio.DICTIONARY_COLUMNS, "write_statistics": tio.STATISTICS_COLUMNS}
    options |= {"data_page_size": tio.DATA_PAGE}
    written = []
    for make in (partial(tio._parquet_writer, schema=S.SCHEMA), partial(pq.ParquetWriter, schema=S.SCHEMA)):
        path = tmp_path / f"{len(written)}.parquet"
        with pa.output_stream(path, compression=None) as sink:
            writer = make(sink, **options)
            writer.write_table(table, row_group_size=2000)
            writer.add_key_value_metadata({b"k": b"v"})
            writer.close()
        written.append(path.read_bytes())
    assert written[0] == written[1] and len(written[0]) > 100_000

    code = (
        "import sys; from traceconv.cli import main\n"
        f"try: main(['ingest', {str(TRACE)!r}, '-o', {str(tmp_path / 'c.parquet')!r}, '--workers', '1'])\n"
        "except SystemExit: pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('pyarrow.')))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = run.stdout.splitlines()[-1]
    assert "pyarrow._parquet" in loaded and "pyarrow.fs" not in loaded and "pyarrow.parquet" not in loaded
    assert pq.read_table(tmp_path / "c.parquet").num_rows == 16079


def test_annotations_spilled_to_a_file_link_as_in_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The user annotations that wait for the last cpu_op (20 API calls of this trace take theirs
    from one) link the same when every spill goes to a temporary file, which is then removed."""
    import tempfile

    import pyarrow.compute as pc

    from traceconv.readers.pytorch import spill

    path = fixture("pytorch/h200/streams_memcpy.json")
    in_memory = pa.concat_tables(pytorch.PytorchReader(path, workers=0).tables())
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(spill.Spill.__init__, "__defaults__", (0,))
    made: list[str] = []
    real_path = spill.temporary_path
    monkeypatch.setattr(spill, "temporary_path", lambda: made.append(real_path()) or made[-1])
    on_disk = pa.concat_tables(pytorch.PytorchReader(path, workers=0).tables())
    for name in ("op_event_id", "op_name"):
        assert on_disk[name].equals(in_memory[name]), name
    annotation = pc.equal(in_memory["category"].cast(pa.string()), "user_annotation")
    annotations = set(in_memory.filter(annotation)["event_id"].to_pylist())
    assert annotations & set(on_disk["op_event_id"].to_pylist())  # some calls took an annotation
    assert len(made) >= 3 and os.listdir(tmp_path) == []  # chunks, operators, annotations: all removed


def test_the_public_writer_serves_where_the_inner_one_differs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pyarrow whose inner writer class takes other options (here: one it does not know):
    the conversion uses pyarrow.parquet.ParquetWriter instead and writes the same file."""
    import traceconv.writing as tio

    traceconv.convert(TRACE, tmp_path / "inner.parquet", workers=0)
    monkeypatch.setattr(tio, "WRITER_DEFAULTS", {**tio.WRITER_DEFAULTS, "an_option_of_another_version": 1})
    traceconv.convert(TRACE, tmp_path / "public.parquet", workers=0)
    assert (tmp_path / "public.parquet").read_bytes() == (tmp_path / "inner.parquet").read_bytes()


IMPORTS_PROGRAM = """
import gc
from traceconv import process
process.imported()  # a library caller's process: nothing changes
assert gc.isenabled() and gc.get_freeze_count() == 0, "library"
process.tune()  # the command line's first step
assert not gc.isenabled(), "tuned"
import json, decimal  # the command's imports
process.imported()
assert gc.isenabled() and gc.get_freeze_count() > 0, "imported"
gc.disable()
process.imported()  # once only: a later call changes nothing
assert not gc.isenabled(), "once"
print("ok")
"""


def test_the_command_line_imports_without_cyclic_collection_then_turns_it_back_on() -> None:
    done = subprocess.run([sys.executable, "-c", IMPORTS_PROGRAM], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "ok", done.stderr


@pytest.mark.parametrize("command", ["summary", "ingest"])
def test_a_command_turns_collection_back_on_once_its_imports_are_done(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An analysis (once it opens its input) and a conversion (once it opens its reader) run with
    cyclic collection, the modules they imported frozen out of it."""
    import gc

    from click.testing import CliRunner

    from traceconv import process
    from traceconv.cli import main

    if command == "ingest":
        args = [command, str(TRACE), "-o", str(tmp_path / "out.parquet"), "--workers", "0"]
    else:  # a Parquet file: no conversion on the way, which would turn collection on by itself
        traceconv.convert(TRACE, tmp_path / "in.parquet", workers=0)
        args = [command, str(tmp_path / "in.parquet")]
    seen: list[bool] = []
    real = process.imported

    def imported() -> None:
        seen.append(gc.isenabled())
        real()

    monkeypatch.setattr(process, "imported", imported)
    gc.unfreeze()
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert seen and seen[0] is False  # its imports ran without collection
    assert gc.isenabled() and gc.get_freeze_count() > 0
    gc.unfreeze()


def test_a_library_conversion_leaves_the_callers_process_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No cyclic-GC switch-off and no malloc_trim behind a library caller's back; the CLI's
    tuning (process.tune) turns both on."""
    import gc

    from traceconv import process

    calls: list[str] = []
    monkeypatch.setattr(gc, "disable", lambda: calls.append("gc.disable"))
    monkeypatch.setattr(process, "_tuned", False)
    traceconv.convert(TRACE, tmp_path / "a.parquet", workers=0)
    assert calls == [] and gc.isenabled()
    monkeypatch.setattr(process, "_tuned", True)
    traceconv.convert(TRACE, tmp_path / "b.parquet", workers=0)
    assert "gc.disable" in calls
