"""Conversions on a Dask cluster: a real scheduler and two workers on 127.0.0.1, each its own
process, convert 40 real traces into the same dataset as a local run; a failed task leaves no
part, a re-run skips complete parts, and a worker killed mid-run never leaves a partial dataset."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from traceconv import dataset
from traceconv.errors import InputError
from traceconv.ingest import is_traceconv_output

from .conftest import CORPUS_REQUIRED, fixture
from .fleet_data import SMALL, ingest, input_kinds, parts, traces

if CORPUS_REQUIRED:  # CI installs traceconv[dask]: a missing Dask is a failure there
    import distributed
else:
    distributed = pytest.importorskip("distributed", reason="needs the dask extra: pip install 'traceconv[dask]'")
import cloudpickle

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # _completed runs on the scheduler
DASK = Path(sys.executable).with_name("dask")


@dataclass
class Fleet:
    address: str
    scheduler: subprocess.Popen[bytes]
    workers: list[subprocess.Popen[bytes]]


@contextlib.contextmanager
def cluster(folder: Path, workers: int = 2) -> Iterator[Fleet]:
    """``dask scheduler`` and ``dask worker`` processes on 127.0.0.1, stopped on exit."""
    folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "DASK_DISTRIBUTED__ADMIN__LOW_LEVEL_LOG_LENGTH": "100000"}
    file = folder / "scheduler.json"
    log = open(folder / "cluster.log", "wb")  # noqa: SIM115 (closed below, after the processes)
    common: dict[str, Any] = {"stdout": log, "stderr": subprocess.STDOUT, "env": env, "cwd": folder}
    args = ["--host", "127.0.0.1", "--port", "0", "--no-dashboard", "--scheduler-file", str(file)]
    procs = [subprocess.Popen([str(DASK), "scheduler", *args], **common)]
    try:
        deadline = time.monotonic() + 60
        while not file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        address = json.loads(file.read_text())["address"]
        for i in range(workers):
            cmd = [str(DASK), "worker", address, "--nthreads", "1", "--no-nanny", "--no-dashboard", "--name", f"w{i}"]
            procs.append(subprocess.Popen([*cmd, "--host", "127.0.0.1"], **common))
        with distributed.Client(address, timeout=60) as client:
            client.wait_for_workers(workers, timeout=120)
        yield Fleet(address, procs[0], procs[1:])
    finally:
        # Workers first, each gone before the scheduler is asked to stop: a worker stopping while
        # the scheduler stops too waits out its reconnection timeouts (40 s in all).
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    with cluster(tmp_path_factory.mktemp("fleet")) as running:
        yield running


def _completed(dask_scheduler: Any) -> int:
    """On the scheduler: traceconv tasks that finished with a result."""
    log = dask_scheduler.transition_log
    return len({t.key for t in log if t.finish == "memory" and str(t.key).startswith("traceconv")})


def completed(address: str) -> int:
    with distributed.Client(address, timeout=60) as client:
        count: int = client.run_on_scheduler(_completed)
    return count


def kinds_by_sql(out: Path) -> Counter[str]:
    query = "SELECT kind, count(*) AS n FROM events GROUP BY kind"
    cmd = [sys.executable, "-m", "traceconv.cli", "sql", query, str(out), "--format", "json"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True)
    return Counter({row["kind"]: row["n"] for row in json.loads(run.stdout)})


@pytest.mark.slow  # a cluster of three processes converting 40 traces, twice; make test keeps local:N below
def test_forty_traces_on_a_two_worker_cluster_make_the_dataset_a_local_run_makes(tmp_path: Path, fleet: Fleet) -> None:
    runs = traces(tmp_path / "runs")
    assert len(list(runs.iterdir())) == 40
    before = completed(fleet.address)
    run = ingest(runs, "-o", tmp_path / "fleet.parquet", "--scheduler", fleet.address)
    assert run.returncode == 0, run.stderr
    assert completed(fleet.address) - before >= 40
    assert ingest(runs, "-o", tmp_path / "local.parquet", "--partitioned").returncode == 0
    got, want = parts(tmp_path / "fleet.parquet"), parts(tmp_path / "local.parquet")
    assert got == want  # every part byte for byte, and _common_metadata
    assert len([n for n in got if n.endswith(".parquet")]) == 40
    assert {n.split("/")[0] for n in got} == {"_common_metadata", "rank=0", "rank=1", f"rank={dataset.NULL_VALUE}"}
    one_each = input_kinds(traces(tmp_path / "one_each", copies=1))
    assert kinds_by_sql(tmp_path / "fleet.parquet") == Counter({k: 4 * n for k, n in one_each.items()})


def _settled_parts(out: Path, limit: float = 60.0) -> list[Path]:
    """The dataset's complete parts once its files stop changing: tasks already running when a
    task failed finish their parts after the command has returned (``convert_on_cluster``)."""
    deadline, quiet, seen = time.monotonic() + limit, 0, None
    while quiet < 3 and time.monotonic() < deadline:
        time.sleep(0.5)
        now = sorted(str(p) for p in out.rglob("*"))
        writing = any(name.endswith(".tmp") for name in now)
        quiet = quiet + 1 if now == seen and not writing else 0
        seen = now
    return dataset.parts(out)


@pytest.mark.slow  # on the cluster, then again: make test keeps local:N below
def test_a_failed_task_leaves_no_part_and_a_rerun_skips_complete_parts(tmp_path: Path, fleet: Fleet) -> None:
    runs = traces(tmp_path / "runs", copies=2, names=SMALL[:4])
    broken = runs / "copy1_seed_linear.json"
    broken.write_bytes(fixture("pytorch/h200/seed_linear.json").read_bytes()[:50_000])
    out = tmp_path / "out.parquet"
    run = ingest(runs, "-o", out, "--scheduler", fleet.address)
    assert run.returncode == InputError.exit_code, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "copy1_seed_linear.json: truncated" in lines[0], run.stderr
    assert not (out / dataset.COMMON_METADATA).exists()  # the dataset is not complete
    assert not list(out.rglob("copy1_seed_linear*"))
    assert all(is_traceconv_output(p) for p in dataset.parts(out))
    done = {p.name for p in _settled_parts(out)}

    broken.write_bytes(fixture("pytorch/h200/seed_linear.json").read_bytes())
    env = {**os.environ, "DASK_SCHEDULER_ADDRESS": fleet.address}  # as the nsys recipes read it
    again = ingest(runs, "-o", out, env=env)
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("up to date, skipped") == len(done)
    assert ingest(runs, "-o", tmp_path / "local.parquet", "--partitioned").returncode == 0
    assert parts(out) == parts(tmp_path / "local.parquet")


@pytest.mark.slow  # a cluster of its own converting 40 traces, and a local run of them
def test_a_worker_killed_mid_run_never_leaves_a_partial_dataset(tmp_path: Path) -> None:
    runs = traces(tmp_path / "runs")
    out = tmp_path / "out.parquet"
    with cluster(tmp_path / "cluster") as running:
        cmd = [sys.executable, "-m", "traceconv.cli", "ingest", str(runs), "-o", str(out)]
        proc = subprocess.Popen([*cmd, "--scheduler", running.address], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while len(dataset.parts(out)) < 3 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before a worker could be killed"
        running.workers[0].kill()
        stdout, stderr = proc.communicate(timeout=300)
    assert ingest(runs, "-o", tmp_path / "local.parquet", "--partitioned").returncode == 0
    want = parts(tmp_path / "local.parquet")
    if proc.returncode == 0:  # the other worker took the lost tasks over
        assert parts(out) == want
        assert stdout.decode().count(" events in ") == 40
    else:  # a clean stop: one line, complete parts only, no _common_metadata
        assert len(stderr.decode().strip().splitlines()) == 1, stderr
        got = parts(out)
        assert dataset.COMMON_METADATA not in got
        assert all(want[name] == data for name, data in got.items() if not Path(name).name.startswith("."))


def test_local_n_starts_a_cluster_of_its_own(tmp_path: Path) -> None:
    runs = traces(tmp_path / "runs", copies=1, names=SMALL[:3])
    run = ingest(runs, "-o", tmp_path / "out.parquet", "--scheduler", "local:2")
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr and "WARNING" not in run.stderr, run.stderr
    ingest(runs, "-o", tmp_path / "local.parquet", "--partitioned")
    assert parts(tmp_path / "out.parquet") == parts(tmp_path / "local.parquet")
    bad = ingest(runs, "-o", tmp_path / "x.parquet", "--scheduler", "local:0")
    assert bad.returncode == 2 and "local:N must be a whole number" in bad.stderr
