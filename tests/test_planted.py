"""The diagnosis on real profiles of programs with one known problem each, and on healthy ones.

``fixtures/planted/manifest.json`` lists each profile with what was planted in it (made on the GPU
machine by ``tests/tools/planted/``; see ``fixtures/planted/README.md``), and the corpus' own
programs whose problem is known. For each: the planted problem is the finding that would win the
most and is reported at medium or high; a healthy run gets no finding of medium or high severity;
findings come in the order of their savings; and the step time and the GPUs' busy share agree
with an independent reading of the raw file (:mod:`tests.step_truth`): within 10% and 5 points.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from traceconv.analyses.common import load
from traceconv.analyses.prepare import INPUT_COLUMNS
from traceconv.analyses.summary import as_dict, summarize

from .conftest import FIXTURES, fixture
from .step_truth import json_steps, sqlite_steps

MANIFEST = json.loads((FIXTURES / "planted" / "manifest.json").read_text())
CASES = [
    pytest.param(c, id=Path(c["file"]).name.split(".")[0] + ("-nsys" if ".sqlite" in c["file"] else ""))
    for c in MANIFEST["profiles"]
]
SEVERE = ("high", "medium")


def _sweep(cases: list[Any]) -> list[Any]:
    """A check repeated over the profiles: `make test` runs it on the first PyTorch profile and the
    first Nsight Systems export, and marks the rest ``sweep`` (as tests/conftest.py does)."""
    kept: set[bool] = set()
    out = []
    for c in cases:
        nsys = ".sqlite" in c.values[0]["file"]
        out.append(pytest.param(*c.values, id=c.id, marks=[*c.marks, *([pytest.mark.sweep] if nsys in kept else [])]))
        kept.add(nsys)
    return out


def _summary(path: Path) -> dict[str, Any]:
    return as_dict(summarize(load(path, columns=INPUT_COLUMNS)), 0)


@pytest.fixture(scope="module")
def summaries() -> dict[str, dict[str, Any]]:
    return {}


def _of(case: dict[str, Any], cache: dict[str, dict[str, Any]]) -> tuple[Path, dict[str, Any]]:
    path = fixture(case["file"], packed=case.get("xz", False))
    if case["file"] not in cache:
        cache[case["file"]] = _summary(path)
    return path, cache[case["file"]]


@pytest.mark.parametrize("case", CASES)
def test_the_planted_problem_is_the_top_finding_and_healthy_runs_are_quiet(
    case: dict[str, Any], summaries: dict[str, dict[str, Any]]
) -> None:
    _, d = _of(case, summaries)
    severe = [f for f in d["findings"] if f["severity"] in SEVERE]
    if not case["problem"]:
        assert not severe, [(f["code"], f["severity"], f["saving_pct"]) for f in severe]
        return
    assert severe, f"nothing of medium or high severity for {case['problem']}"
    assert severe[0]["code"] in case["codes"], (case["problem"], [(f["code"], f["saving_pct"]) for f in severe])
    planted = case.get("planted", case["codes"][0])
    if case.get("costless"):  # reported, at the little its fix would win (the real run without it agrees)
        (f,) = [f for f in d["findings"] if f["code"] == planted]
        assert f["severity"] == "low" and f["saving_pct"] < 5.0, f
    else:
        assert planted in {f["code"] for f in severe}, (planted, [(f["code"], f["severity"]) for f in d["findings"]])
    savings = [f["saving_ns"] for f in d["findings"] if f["saving_ns"] is not None]
    assert savings == sorted(savings, reverse=True)


@pytest.mark.parametrize("case", _sweep([c for c in CASES if c.values[0].get("steps", True)]))
def test_steps_are_measured_as_the_gpu_ran_them(case: dict[str, Any], summaries: dict[str, dict[str, Any]]) -> None:
    path, d = _of(case, summaries)
    truth = sqlite_steps(path) if path.suffix == ".sqlite" else json_steps(path)
    steps = d["steps"]
    assert steps is not None and truth["step_ns"]
    assert steps["median_ns"] == pytest.approx(truth["step_ns"], rel=0.10)
    busy = d["bound"]["gpu_busy_pct"]
    assert busy == pytest.approx(truth["busy_pct"], abs=5.0)
    assert (steps["host_ahead_ns"] > 0) == (truth["host_ahead_ns"] > 0) or abs(truth["host_ahead_ns"]) < 0.01 * truth[
        "step_ns"
    ]


PROJECTED = [c for c in MANIFEST["profiles"] if c["file"].startswith("planted/") and c["file"].endswith(".sqlite")]


@pytest.mark.parametrize("case", [c for c in PROJECTED if c.get("graphs") != "whole"], ids=lambda c: c["file"])
def test_each_steps_gpu_work_is_nvidias_nvtx_projection(case: dict[str, Any]) -> None:
    """NVIDIA's own `nsys stats --report nvtx_gpu_proj_trace` projects each NVTX range onto the GPU
    work its calls launched: a step's first GPU start and last GPU end are the same here."""
    import csv
    import lzma

    from traceconv.analyses.prepare import prepare

    csv_path = FIXTURES / case["file"].replace(".sqlite", "_nvtx_gpu_proj_trace.csv.xz")
    with lzma.open(csv_path, "rt") as f:
        rows = [r for r in csv.DictReader(f) if r["Name"].lstrip(":").startswith("step_")]
    nvidia = {
        int(r["Orig Duration (ns)"]): (
            int(r["Projected Start (ns)"]) - int(r["Orig Start (ns)"]),
            int(r["Projected Start (ns)"]) + int(r["Projected Duration (ns)"]) - int(r["Orig Start (ns)"]),
        )
        for r in rows
    }
    steps = prepare(load(_of_path(case), columns=INPUT_COLUMNS)).steps
    assert steps is not None and steps.count >= 3
    for cs, ce, gs, ge in zip(steps.cpu_start_ns, steps.cpu_end_ns, steps.gpu_start_ns, steps.gpu_end_ns, strict=True):
        assert nvidia[int(ce - cs)] == (int(gs - cs), int(ge - cs))


def _of_path(case: dict[str, Any]) -> Path:
    return fixture(case["file"], packed=case.get("xz", False))


def test_the_advice_follows_what_the_host_did() -> None:
    """The fix named is the one for what kept the host busy while the GPU waited: the data pipeline,
    launches of short kernels, or an optimizer's step (reduce-overhead graphs the model, not AdamW)."""
    cases = {
        "planted/h200/pytorch/dataloader.json": "DataLoader workers",
        "planted/h200/pytorch/train_bf16.json": "CUDA graph",
        "planted/h200/pytorch/tx_ro.json": "fused=True",
    }
    for rel, words in cases.items():
        d = _summary(fixture(rel, packed=True))
        idle = [f for f in d["findings"] if f["code"] == "GPU_IDLE"]
        assert idle and words in idle[0]["message"], (rel, idle[0]["message"] if idle else d["findings"])
    ro = _summary(fixture("planted/h200/pytorch/tx_ro.json", packed=True))
    assert not any("reduce-overhead" in f["message"] for f in ro["findings"])  # it already replays graphs
