"""`traceconv diff` (issue 5): before/after a fix, lined up per step, on the corpus' buggy/fixed pairs."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from traceconv.analyses.common import load
from traceconv.analyses.diff import as_dict, diff
from traceconv.analyses.prepare import INPUT_COLUMNS
from traceconv.cli import main

from .conftest import fixture
from .test_summary import summary_of

BUGGY, FIXED = (
    fixture("pytorch/h200/train_buggy.pt.trace.json.gz"),
    fixture("pytorch/h200/train_fixed.pt.trace.json.gz"),
)
NSYS_BUGGY, NSYS_FIXED = fixture("nsys/h200/buggy.sqlite"), fixture("nsys/h200/fixed.sqlite")
SUMMARY_KEYS = {"gpu", "bound", "top_ops", "top_kernels", "memcpy", "sync", "findings"}


@cache
def diff_of(before: Path, after: Path, top: int = 0) -> dict[str, Any]:
    tables = [load(p, columns=INPUT_COLUMNS) for p in (before, after)]
    return as_dict(diff(tables[0], tables[1]), top)


@pytest.mark.parametrize("before, after", [(BUGGY, FIXED), (NSYS_BUGGY, NSYS_FIXED)], ids=["pytorch", "nsys"])
def test_the_fix_removes_dtoh_copies_item_syncs_and_the_copy_finding(before: Path, after: Path) -> None:
    d = diff_of(before, after)
    b, a, delta = d["before"], d["after"], d["delta"]
    assert d["scope"] == "steps" and d["note"] is None
    assert b["steps"] == a["steps"] and b["label"] == a["label"]
    assert delta["memcpy"]["DtoH"] == {
        "count": -2.0,
        "bytes": b["memcpy"]["DtoH"]["bytes"] * -1,
        "dur_ns": -b["memcpy"]["DtoH"]["dur_ns"],
        "status": "disappeared",
    }
    assert "DtoH" not in a["memcpy"]
    assert (b["memcpy"]["HtoD"]["count"], a["memcpy"]["HtoD"]["count"]) == (3.0, 2.0)
    assert (b["sync"]["count"], a["sync"]["count"]) == (5.0, 2.0)
    assert delta["sync"]["count"] == -3.0
    gone = [o for o in delta["sync"]["ops"] if o["status"] == "disappeared"]
    kept = [o for o in delta["sync"]["ops"] if o["status"] == "kept"]
    assert sum(o["before"] for o in gone) == 3.0  # the weights' .to(), .item() and .cpu()
    assert all("data_to_gpu" in (o["name"], o["region"]) and o["count"] == 0 for o in kept)
    # by kind: the host no longer waits for GPU results; it still waits for the input batch to be staged
    waits, staging = (tuple(side["sync"][k]["count"] for side in (b, a)) for k in ("result_waits", "staging"))
    assert (waits, staging) == ((2.0, 0.0), (3.0, 2.0))
    assert (delta["sync"]["result_waits"]["count"], delta["sync"]["staging"]["count"]) == (-2.0, -1.0)
    assert delta["sync"]["result_waits"]["dur_ns"] == -b["sync"]["result_waits"]["dur_ns"] < 0
    assert all(o["status"] == "disappeared" for o in delta["sync"]["result_waits"]["ops"])
    # the copies go; the host no longer stalls on the weights' pageable copy (the small input copies
    # left cost microseconds: below the findings' floor); the nsys run stops being CPU-bound
    gone = {"HOST_DEVICE_COPIES", "PAGEABLE_COPIES"} | ({"GPU_IDLE"} if before.suffix == ".sqlite" else set())
    assert set(delta["findings"]["gone"]) == gone
    assert delta["findings"]["new"] == []
    assert a["step_ns"] < b["step_ns"] and delta["step_ns"] == a["step_ns"] - b["step_ns"]


def test_the_nsys_pair_reports_the_median_step_without_the_warm_up() -> None:
    """The first step of each nsys run (365 and 347 ms: CUDA and cuBLAS set-up) is warm-up: the per-step
    figures are the other five steps', and the step time their median (50.3 -> 15.0 ms, -70%)."""
    d = diff_of(NSYS_BUGGY, NSYS_FIXED)
    assert (d["before"]["steps"], d["after"]["steps"]) == (5, 5)
    assert d["before"]["step_ns"] == pytest.approx(50.31e6, rel=0.01) and d["after"]["step_ns"] == pytest.approx(
        14.99e6, rel=0.01
    )
    assert d["delta"]["step_ns"] / d["before"]["step_ns"] == pytest.approx(-0.70, abs=0.01)
    assert (d["before"]["bound"]["verdict"], d["after"]["bound"]["verdict"]) == ("cpu-bound", "gpu-bound")
    warm = [n for n in d["notes"] if "warm-up" in n]
    assert len(warm) == 2 and warm[0].startswith("before: the first step (364.91 ms")


def test_pytorch_per_step_figures_are_the_summary_divided_by_steps() -> None:
    d, whole = diff_of(BUGGY, FIXED), summary_of(BUGGY)
    steps = whole["steps"]
    assert d["before"]["memcpy"]["HtoD"]["bytes"] == steps["memcpy"]["HtoD"]["bytes"] // steps["count"]
    assert d["before"]["step_ns"] == steps["median_ns"]  # no warm-up in this run: its 3 steps' median
    assert set(d["before"]) >= SUMMARY_KEYS and set(d["delta"]) >= SUMMARY_KEYS - {"bound"}
    by_name = {o["name"]: o for o in d["delta"]["top_ops"]}
    # torch.rand of the weights moved from the host (aten::uniform_ on the CPU) to a GPU kernel
    uniform = by_name["aten::uniform_"]
    assert (
        uniform["cpu_self_ns"] < -20_000_000 and uniform["before"]["gpu_self_ns"] == 0 < uniform["after"]["gpu_self_ns"]
    )
    kernels = {k["name"]: k for k in d["delta"]["top_kernels"]}
    argmax = next(k for name, k in kernels.items() if "ArgMaxOps" in name)
    assert argmax["status"] == "disappeared" and argmax["before"]["count"] == 1.0


def test_a_run_against_itself_changes_nothing() -> None:
    d = diff_of(BUGGY, BUGGY)
    assert d["delta"]["step_ns"] == 0 and d["delta"]["gpu_time_ns"] == 0
    assert d["delta"]["top_ops"] == [] and d["delta"]["top_kernels"] == []
    assert d["delta"]["findings"]["gone"] == d["delta"]["findings"]["new"] == []
    assert all(v["status"] == "kept" and v["count"] == 0 for v in d["delta"]["memcpy"].values())


def test_without_steps_on_both_sides_whole_windows_are_compared() -> None:
    d = diff_of(fixture("pytorch/h200/seed_linear.json"), BUGGY)
    assert d["scope"] == "window" and d["note"].startswith("only after marks steps")
    assert d["before"]["steps"] == d["after"]["steps"] == 1
    assert d["after"]["step_ns"] == summary_of(BUGGY)["gpu"]["0"]["window_ns"]  # the GPU's span, without steps


def test_cli_json_has_before_after_delta_and_table_fits_100_columns() -> None:
    out = CliRunner().invoke(
        main, ["diff", str(BUGGY), str(FIXED), "--format", "json", "--top", "3"], env={"COLUMNS": "100"}
    )
    assert out.exit_code == 0, out.output
    d = json.loads(out.output)
    assert set(d) == {"scope", "note", "before", "after", "delta", "notes", "families"}
    assert len(d["before"]["top_ops"]) == 3 and len(d["delta"]["top_kernels"]) == 3
    # each side's critical path: the median step by what it waited for, its parts summing to it; the fix
    # took the host's work (the weights built on the CPU) off the path
    paths = [d[side]["critical_path"] for side in ("before", "after")]
    assert all(sum(p["parts"].values()) == p["step_ns"] for p in paths)
    assert paths[0]["parts"]["host_ops"] > 10 * paths[1]["parts"]["host_ops"]
    table = CliRunner().invoke(main, ["diff", str(BUGGY), str(FIXED)], env={"COLUMNS": "100"})
    lines = table.output.splitlines()
    assert max(map(len, lines)) <= 100
    assert "gone: PAGEABLE_COPIES, HOST_DEVICE_COPIES" in lines  # by what their fixes won
    assert any(line.startswith("Critical path of the median step: host in operators and ranges") for line in lines)
    assert "result waits 2 -> 0, pageable staging 3 -> 2" in lines
    assert any(line.startswith("DtoH") and line.endswith("disappeared") for line in lines)


@pytest.mark.parametrize("which", [0, 1])
def test_a_missing_input_exits_3_naming_it(tmp_path: Path, which: int) -> None:
    args = [str(BUGGY), str(FIXED)]
    args[which] = str(tmp_path / "gone.json")
    result = CliRunner().invoke(main, ["diff", *args])
    assert result.exit_code == 3
    assert result.output == f"traceconv: error: {args[which]}: does not exist; check the path\n"


@pytest.mark.parametrize("profiler", ["pytorch", "nsys"])
def test_fp32_gemms_moved_to_bf16_take_no_tensor_cores_away(profiler: str) -> None:
    """The planted MLP in fp32 (its GEMMs on the CUDA cores) against the same MLP in bf16: the roofline's
    finding goes, as the summaries of the two runs say on their own."""
    ext = "json" if profiler == "pytorch" else "sqlite"
    before, after = (fixture(f"planted/h200/{profiler}/mlp_{p}.{ext}", packed=True) for p in ("fp32", "bf16"))
    d = diff_of(before, after)
    codes = [{f["code"] for f in summary_of(p)["findings"]} for p in (before, after)]
    assert "NO_TENSOR_CORES" in codes[0] and "NO_TENSOR_CORES" not in codes[1]
    assert "NO_TENSOR_CORES" in d["delta"]["findings"]["gone"]
