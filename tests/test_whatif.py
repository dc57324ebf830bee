"""``whatif``: the dependency graph replayed with a change, checked against real runs without the problem.

A pair is a real run with a problem and the same program without it (``fixtures/planted/manifest.json``
``pairs``, and the corpus' own: ``train_buggy`` -> ``train_fixed``, ``buggy.sqlite`` -> ``fixed.sqlite``).
The prediction with the named change must land within max(3% of the run without the problem, 25% of
the real change) of that run's step time, and doing nothing must miss it. The replay without a
change reproduces every trace's own step time; the critical path's parts sum to the step.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from traceconv.analyses.common import load
from traceconv.analyses.prepare import INPUT_COLUMNS
from traceconv.analyses.summary import as_dict, summarize
from traceconv.analyses.whatif import whatif
from traceconv.cli import main

from .conftest import FIXTURES, fixture

MANIFEST = json.loads((FIXTURES / "planted" / "manifest.json").read_text())
PAIRS = [
    pytest.param(p, id=Path(p["before"]).name.split(".")[0] + ("-nsys" if ".sqlite" in p["before"] else ""))
    for p in MANIFEST["pairs"]
]


def _path(rel: str, xz: bool = False) -> Path:
    return fixture(rel, packed=xz)


def _run(path: Path, removes: list[str], scales: list[str] | None = None) -> Any:
    return whatif(load(path, columns=INPUT_COLUMNS), removes, scales or [])


def _mean_kernel_ns(path: Path, pattern: str) -> float:
    """The mean duration of the kernels whose name matches, read straight from the converted rows."""
    df = load(path, columns=("kind", "name", "start_ns", "end_ns")).to_pandas()
    k = df[(df["kind"].astype(str) == "kernel") & df["name"].astype(str).str.contains(pattern, regex=True)]
    assert len(k), (path, pattern)
    return float((k["end_ns"] - k["start_ns"]).mean())


@pytest.mark.parametrize("pair", PAIRS)
def test_the_prediction_lands_on_the_run_without_the_problem(pair: dict[str, Any]) -> None:
    before = _path(pair["before"], pair.get("xz", False))
    after = _run(_path(pair["after"], pair.get("xz", False)), [], ["host=1"])  # measured, through the same steps
    scales = list(pair.get("scale", []))
    if "scale_ratio" in pair:  # e.g. fp32 -> bf16: the kernels scaled by their measured mean times' ratio
        what = pair["scale_ratio"]
        pattern = what.partition(":")[2]
        ratio = _mean_kernel_ns(_path(pair["after"], True), pattern) / _mean_kernel_ns(before, pattern)
        scales.append(f"{what}={ratio:.4f}")
    r = _run(before, pair.get("remove", []), scales)
    real = after.step_ns
    change = r.step_ns - real
    tolerance = max(0.03 * real, 0.25 * abs(change))
    assert abs(r.predicted_step_ns - real) <= tolerance, (r.predicted_step_ns, real, r.step_ns)
    assert abs(r.step_ns - real) > tolerance  # doing nothing would miss it


@pytest.mark.parametrize(
    "rel", ["pytorch/h200/train_buggy.pt.trace.json.gz", "nsys/h200/buggy.sqlite", "nsys/h200/fixed.sqlite"]
)
def test_unchanged_the_replay_is_the_trace_and_the_path_sums_to_the_step(rel: str) -> None:
    r = _run(fixture(rel), [], ["host=1", "launch=1", "kernel:.=1"])
    assert r.predicted_step_ns == r.step_ns and not r.notes
    for path in (r.critical_path, r.predicted_critical_path):
        assert sum(path.parts.values()) == path.step_ns
        assert min(path.parts.values()) >= 0
    assert r.critical_path.parts["gpu_compute"] > 0


def test_a_step_follows_whichever_of_host_and_gpu_is_slower() -> None:
    """fixed.sqlite: the host's step (15.0 ms of its own work, launching) is a little longer than the
    GPU's (12.6 ms busy): halving the kernels wins nothing, halving the host's time wins until the GPU
    is the limit."""
    path = fixture("nsys/h200/fixed.sqlite")
    gpu = _run(path, [], ["kernel:.=0.5"])
    assert gpu.predicted_step_ns == pytest.approx(gpu.step_ns, rel=0.02)
    host = _run(path, [], ["host=0.5", "launch=0.5"])
    busy = sum(v for k, v in host.critical_path.parts.items() if k.startswith("gpu_"))
    assert busy * 0.95 <= host.predicted_step_ns < 0.95 * host.step_ns
    assert host.predicted_critical_path.parts["gpu_compute"] > 0.8 * host.predicted_step_ns  # now the GPU's


def test_the_cli_says_what_it_predicts_and_refuses_what_it_cannot() -> None:
    path = str(fixture("nsys/h200/buggy.sqlite"))
    out = CliRunner().invoke(main, ["whatif", path, "--remove", "copies", "--format", "json"])
    assert out.exit_code == 0, out.output
    d = json.loads(out.output)
    assert {"step_ns", "predicted_step_ns", "critical_path", "predicted_critical_path", "changed"} <= set(d)
    assert d["changed"][0]["what"] == "remove copies" and d["changed"][0]["gpu_ns"] > 0
    table = CliRunner().invoke(main, ["whatif", path, "--remove", "copies"], env={"COLUMNS": "100"})
    assert table.exit_code == 0 and max(map(len, table.output.splitlines())) <= 100
    assert "predicted" in table.output
    bad = CliRunner().invoke(main, ["whatif", path, "--remove", "nonsense"])
    assert bad.exit_code == 2 and "is not a change traceconv knows" in bad.output
    none = CliRunner().invoke(main, ["whatif", path])
    assert none.exit_code == 2 and "name a change" in none.output
    steps = CliRunner().invoke(main, ["whatif", str(fixture("pytorch/h200/seed_linear.json")), "--remove", "syncs"])
    assert steps.exit_code == 2 and "marks no steps" in steps.output


@pytest.mark.parametrize(
    "rel", ["pytorch/h200/train_buggy.pt.trace.json.gz", "nsys/h200/buggy.sqlite", "nsys/h200/fixed.sqlite"]
)
def test_summary_and_whatif_break_the_step_down_alike(rel: str) -> None:
    """Two computations of the critical path: the summary's sweep (DuckDB, slice by slice) and the
    replay's arrays. The GPU's parts are the same union of the same rows; the idle parts are charged
    alike but for one difference: whatif counts a staged copy's call as a wait, the sweep as a CUDA call."""
    path = fixture(rel)
    d = as_dict(summarize(load(path, columns=INPUT_COLUMNS)), 0)
    s = d["critical_path"]
    w = _run(path, [], ["host=1"]).critical_path
    assert sum(s["parts"].values()) == s["step_ns"] == d["steps"]["median_ns"] == w.step_ns
    for part in ("gpu_compute", "gpu_copies", "gpu_communication", "gpu_wait"):
        assert s["parts"][part] == w.parts[part], part
    for part, ns in s["parts"].items():
        assert abs(ns - w.parts[part]) <= 0.01 * s["step_ns"], part


def test_a_findings_saving_is_the_replayed_fix_and_lands_on_the_real_run() -> None:
    """HOST_DEVICE_COPIES on the pageable-copy program: its saving is the step replayed without the
    copies, and the real run with the copies pinned and asynchronous gained about as much."""
    before = _path("planted/h200/pytorch/pageable.json", True)
    after = as_dict(summarize(load(_path("planted/h200/pytorch/pageable.fixed.json", True), columns=INPUT_COLUMNS)))
    d = as_dict(summarize(load(before, columns=INPUT_COLUMNS)))
    (f,) = [f for f in d["findings"] if f["code"] == "HOST_DEVICE_COPIES"]
    predicted = _run(before, ["copies:HtoD", "copies:DtoH"])
    assert f["saving_ns"] == predicted.step_ns - predicted.predicted_step_ns
    assert "the step replayed without them" in f["message"]
    real = d["steps"]["median_ns"] - after["steps"]["median_ns"]
    assert abs(f["saving_ns"] - real) <= max(0.03 * after["steps"]["median_ns"], 0.25 * real)


def test_without_operators_in_the_trace_only_long_gaps_are_outside_them() -> None:
    """nsys without ``--pytorch=autograd-nvtx`` has no operator ranges: the short gaps between CUDA calls
    are the operators' dispatch, so ``--remove host:outside-ops`` takes only the gaps of 200 µs or more
    outside every NVTX range (steps aside). The truth, per step, read straight from the SQLite export."""
    path = _path("planted/h200/nsys/dataloader.sqlite", True)
    db = sqlite3.connect(path)
    calls = np.array(db.execute("SELECT start, end FROM CUPTI_ACTIVITY_KIND_RUNTIME ORDER BY start").fetchall())
    steps = db.execute("SELECT start, end FROM NVTX_EVENTS WHERE text LIKE 'step_%'").fetchall()
    ranges = db.execute(
        "SELECT start, end FROM NVTX_EVENTS WHERE end IS NOT NULL AND coalesce(text, '') NOT LIKE 'step_%'"
    ).fetchall()
    db.close()
    start, end = calls[:, 0], calls[:, 1]
    before = np.r_[start[0], np.maximum.accumulate(end)[:-1]]  # the end of every call before each
    gap_start = np.minimum(before, start)
    outside = 0
    for a, b in steps:
        for s, e in zip(gap_start, start, strict=True):
            if a <= e < b and e - s >= 200_000:
                covered, reach = 0, s  # the ranges' union inside the gap
                for x, y in sorted((max(s, x), min(e, y)) for x, y in ranges if x < e and y > s):
                    covered += max(y - max(x, reach), 0)
                    reach = max(reach, y)
                outside += e - s - covered
    (changed,) = _run(path, ["host:outside-ops"]).changed
    assert outside > 0.5 * 36e6 * len(steps)  # most of the step: the 25 ms data pipeline, and more
    assert changed.host_ns == round(outside / len(steps))


@pytest.mark.parametrize("stem", ["planted/h200/pytorch/dataloader.json", "planted/h100/nsys/dataloader.sqlite"])
def test_a_data_pipelines_saving_is_the_step_replayed_without_it(stem: str) -> None:
    """GPU_IDLE where the host's own work outside every operator is most of the wait: its saving is the
    step replayed without that work, and the real run with the batches ready on the GPU gained about
    as much. Where the host mostly dispatched operators (a bf16 transformer's step), the gaps' estimate stays."""
    before = _path(stem, True)
    fixed = stem.replace("dataloader.", "dataloader.fixed.")
    after = as_dict(summarize(load(_path(fixed, True), columns=INPUT_COLUMNS)))
    d = as_dict(summarize(load(before, columns=INPUT_COLUMNS)))
    (f,) = [f for f in d["findings"] if f["code"] == "GPU_IDLE"]
    predicted = _run(before, ["host:outside-ops"])
    assert f["saving_ns"] == predicted.step_ns - predicted.predicted_step_ns
    assert "the step replayed without the host's work outside every operator" in f["message"]
    real = d["steps"]["median_ns"] - after["steps"]["median_ns"]
    assert abs(f["saving_ns"] - real) <= max(0.03 * after["steps"]["median_ns"], 0.25 * real)
    launches = as_dict(summarize(load(_path("planted/h100/pytorch/train_bf16.json", True), columns=INPUT_COLUMNS)))
    (idle,) = [f for f in launches["findings"] if f["code"] == "GPU_IDLE"]
    assert "CUDA graph" in idle["message"] and "replayed" not in idle["message"]
