"""``whatif`` on several ranks: every rank replayed, coupled through the collectives matched across them.

Real multi-rank traces: the project's DDP pair (two H200s over NCCL; rank 1 the straggler, the
ranks analysis says) and HTA's two-rank sample (NCCL send/recv and all-gathers). The truths are
read from the raw JSON (``tests/step_truth.py``, and the NCCL kernels here), not from our Parquet:
each rank's measured step, which rank arrives last at the collectives, the transfers' times.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from traceconv.analyses.inputs import open_source
from traceconv.analyses.whatif import WhatIf, whatif
from traceconv.cli import main

from .conftest import fixture
from .kineto_truth import load, to_ns
from .step_truth import json_steps

DDP = ("pytorch/h200/ddp_rank0.pt.trace.json", "pytorch/h200/ddp_rank1.pt.trace.json")
HTA = tuple(
    f"pytorch/public/facebookresearch__HolisticTraceAnalysis__tests_data_trace_filter_sampled_rank-{r}.json.gz"
    for r in (0, 1)
)
MATCHED = 4  # the DDP pair's all-reduces on both ranks: rank 0 profiled one more, before them


def _dir(tmp_path: Path, names: tuple[str, ...]) -> Path:
    d = tmp_path / "ranks"
    d.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copy(fixture(name), d / Path(name).name)
    return d


def _run(d: Path, scales: list[str], rank: str | None = None, removes: list[str] | None = None) -> WhatIf:
    with open_source([d]) as src:
        return whatif(src, removes or [], scales, rank=rank)


def _nccl(path: Path) -> list[tuple[int, int]]:
    """(start, end) of the trace's NCCL kernels, in time order, read from the JSON."""
    events = load(path)["traceEvents"]
    rows = [
        (to_ns(e["ts"]), to_ns(e["ts"]) + to_ns(e["dur"]))
        for e in events
        if e.get("ph") == "X" and e.get("cat") == "kernel" and "nccl" in str(e.get("name", "")).lower()
    ]
    return sorted((int(s), int(e)) for s, e in rows if s is not None and e is not None)


def _straggler() -> tuple[int, int]:
    """The DDP rank that arrives last at the matched all-reduces (their ends coincide across ranks,
    which puts both on one clock), and its transfers' time per step (its kernels did not wait)."""
    kernels = [_nccl(fixture(p))[-MATCHED:] for p in DDP]
    offset = sorted(a[1] - b[1] for a, b in zip(kernels[0], kernels[1], strict=True))[MATCHED // 2]
    later = sum(b[0] + offset > a[0] for a, b in zip(kernels[0], kernels[1], strict=True))
    slow = 1 if later > MATCHED // 2 else 0
    steps = json_steps(fixture(DDP[slow]))["steps"]
    return slow, sum(e - s for s, e in kernels[slow]) // steps


@pytest.mark.parametrize("names", [pytest.param(DDP, id="ddp"), pytest.param(HTA, id="hta", marks=pytest.mark.sweep)])
def test_unchanged_every_rank_replays_its_measured_step(tmp_path: Path, names: tuple[str, ...]) -> None:
    r = _run(_dir(tmp_path, names), ["host=1", "kernel:.=1"])
    truth = [json_steps(fixture(n))["step_ns"] for n in names]
    assert [k.step_ns for k in r.ranks] == pytest.approx(truth, abs=1)
    for k in r.ranks:
        assert k.replayed_step_ns == pytest.approx(k.step_ns, rel=1e-3)  # the coupled replay's own error
        assert k.predicted_step_ns == k.step_ns  # ... cancels
    assert r.step_ns == r.predicted_step_ns == max(truth)
    assert r.slowest_rank == r.predicted_slowest_rank == str(max(range(len(truth)), key=lambda i: truth[i]))
    assert sum(r.critical_path.parts.values()) == r.critical_path.step_ns


def test_only_the_straggler_holds_the_job_back(tmp_path: Path) -> None:
    """Halving the host's time of the rank that arrives on time wins the job nothing: it waits for the
    straggler at every all-reduce anyway. Halving the straggler's shortens both ranks' steps: the
    other rank no longer waits for it, though nothing of its own changed."""
    d = _dir(tmp_path, DDP)
    slow, _ = _straggler()
    other = 1 - slow
    fast = _run(d, ["host=0.5"], rank=str(other))
    assert fast.predicted_step_ns == pytest.approx(fast.step_ns, rel=0.005)
    assert [k.changed for k in fast.ranks] == [k == other for k in range(2)]
    late = _run(d, ["host=0.5"], rank=str(slow))
    assert late.predicted_step_ns < 0.95 * late.step_ns
    assert late.ranks[other].predicted_step_ns < 0.95 * late.ranks[other].step_ns  # coupled: it waits less
    assert late.ranks[slow].predicted_step_ns < 0.8 * late.ranks[slow].step_ns


def test_a_collective_moves_at_its_slowest_member(tmp_path: Path) -> None:
    """The transfers made 20x longer on the straggler alone lengthen the other rank's step too (a
    collective completes on every rank together), by a good part of what they add per step."""
    slow, transfer = _straggler()
    other = 1 - slow
    r = _run(_dir(tmp_path, DDP), ["kernel:nccl=20"], rank=str(slow))
    added = r.ranks[other].predicted_step_ns - r.ranks[other].step_ns
    assert 0.2 * 19 * transfer < added < 19 * transfer * 1.05
    assert all(k.predicted_step_ns > k.step_ns for k in r.ranks)
    assert r.predicted_step_ns > r.step_ns


def test_the_cli_reports_each_rank_and_refuses_a_rank_it_lacks(tmp_path: Path) -> None:
    d = str(_dir(tmp_path, DDP))
    out = CliRunner().invoke(main, ["whatif", d, "--scale", "host=0.5", "--rank", "1", "--format", "json"])
    assert out.exit_code == 0, out.output
    doc: dict[str, Any] = json.loads(out.output)
    assert {"step_ns", "predicted_step_ns", "critical_path", "predicted_critical_path", "changed", "ranks"} <= set(doc)
    assert [k["rank"] for k in doc["ranks"]] == [0, 1]
    assert doc["step_ns"] == max(k["step_ns"] for k in doc["ranks"])
    assert doc["predicted_step_ns"] == max(k["predicted_step_ns"] for k in doc["ranks"])
    table = CliRunner().invoke(main, ["whatif", d, "--scale", "host=0.5", "--rank", "1"], env={"COLUMNS": "100"})
    assert table.exit_code == 0 and max(map(len, table.output.splitlines())) <= 100
    assert "Each rank's median step" in table.output
    bad = CliRunner().invoke(main, ["whatif", d, "--scale", "host=0.5", "--rank", "7"])
    assert bad.exit_code == 2 and "--rank 7: no such rank in the input; choose from 0, 1" in bad.output
    one = CliRunner().invoke(main, ["whatif", str(fixture(DDP[0])), "--scale", "host=0.5", "--rank", "1"])
    assert one.exit_code == 2 and "the input holds one rank" in one.output
