"""Several small traces converted at once (one process each): the same files, in order, and the
same clean stops as one at a time."""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from traceconv.batch import convert_many, processes_for
from traceconv.cli import main
from traceconv.errors import InputError, TraceconvError
from traceconv.ingest import plan_jobs
from traceconv.readers.pytorch import reader as pytorch
from traceconv.readers.pytorch.workers import worker_count

from .conftest import fixture

SMALL = ["seed_linear.json", "streams_memcpy.json", "cuda_graph.json", "compiled_triton.json"]


def _ranks(folder: Path, copies: int = 2) -> Path:
    """A folder of small real traces, as tensorboard_trace_handler writes one per rank."""
    folder.mkdir()
    for i in range(copies):
        for name in SMALL:
            shutil.copy(fixture(f"pytorch/h200/{name}"), folder / f"rank{i}_{name}")
    return folder


def test_several_small_traces_convert_at_once_to_the_same_files(tmp_path: Path) -> None:
    ranks = _ranks(tmp_path / "ranks")
    jobs = plan_jobs([ranks], tmp_path / "together")
    assert processes_for(jobs, None) == min(worker_count(None) + 1, len(jobs))
    assert processes_for(jobs, None, workers=0) == 1 and processes_for(jobs, None, workers=2) == 3
    done = [job for job, _, _ in convert_many(jobs, None, 2)]
    assert done == jobs  # in the order of the inputs
    result = CliRunner().invoke(main, ["ingest", str(ranks), "-o", str(tmp_path / "one"), "--workers", "0"])
    assert result.exit_code == 0, result.output
    for job in jobs:
        assert job.output.read_bytes() == (tmp_path / "one" / job.output.name).read_bytes(), job.output.name


def test_large_traces_are_not_converted_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A trace that workers convert keeps them: its batch goes one at a time."""
    ranks = _ranks(tmp_path / "ranks", copies=1)
    shutil.copy(fixture("pytorch/h200/train_buggy.pt.trace.json.gz"), ranks)  # 0.3 MB gz, ~8x as JSON
    jobs = plan_jobs([ranks], tmp_path / "out")
    assert processes_for(jobs, None, workers=1) == 2  # all small at 6 chunks of 1 MiB
    monkeypatch.setattr(pytorch, "PARALLEL_CHUNKS", 1)  # workers from 1 MiB: the .gz is large
    assert processes_for(jobs, None, workers=1) == 1


def test_an_error_stops_the_batch_cleanly(tmp_path: Path) -> None:
    ranks = _ranks(tmp_path / "ranks")
    truncated = (fixture("pytorch/h200/seed_linear.json")).read_bytes()[:50_000]
    (ranks / "rank1_seed_linear.json").write_bytes(truncated)
    spill = tmp_path / "tmp"
    spill.mkdir()
    env = {**os.environ, "TMPDIR": str(spill)}
    cmd = [sys.executable, "-m", "traceconv.cli", "ingest", str(ranks), "-o", str(tmp_path / "out")]
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    assert run.returncode == InputError.exit_code, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "rank1_seed_linear.json: truncated" in lines[0], run.stderr
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert "rank0_seed_linear.parquet" in written and not [n for n in written if n.startswith(".")]
    assert os.listdir(spill) == []


def test_ctrl_c_stops_every_process_without_a_traceback(tmp_path: Path) -> None:
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for i in range(40):  # each takes a good fraction of a second: the batch is still running when interrupted
        shutil.copy(fixture("pytorch/h200/train_buggy.pt.trace.json.gz"), ranks / f"rank{i}.pt.trace.json.gz")
    spill = tmp_path / "tmp"
    spill.mkdir()
    env = {**os.environ, "TMPDIR": str(spill)}
    # Python's own Ctrl-C handler, also where the test runs with SIGINT ignored (a background job)
    start = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"
    start += "from traceconv.cli import main; main()"
    cmd = [sys.executable, "-c", start, "ingest", str(ranks), "-o", str(tmp_path / "out")]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, start_new_session=True)
    while not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir()):
        time.sleep(0.02)  # converting: the first file is there
        assert proc.poll() is None, "the batch ended before it could be interrupted"
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal sends it: to every process of the group
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert err.decode().strip() == "traceconv: interrupted; no output was left half-written"
    assert not [n for n in os.listdir(tmp_path / "out") if n.startswith(".")] and os.listdir(spill) == []


def test_errors_cross_processes_whole() -> None:
    exc = InputError("trace.json", "truncated", "use --salvage")
    back = pickle.loads(pickle.dumps(exc))
    assert isinstance(back, InputError) and isinstance(back, TraceconvError)
    assert (back.path, back.problem, back.hint, back.message) == (exc.path, exc.problem, exc.hint, exc.message)
