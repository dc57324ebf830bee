"""Compiled programs (issue 49, parts 2 and 3) on the real H200 profiles of a small transformer:
``torch.compile`` default (``tx_compile``), ``mode="reduce-overhead"`` (``tx_ro``), eager (``tx_eager``),
and a compiled MLP fed a new batch length every step (``tx_recompile``; ``.fixed``: padded to one).

The truths are read from the raw files without traceconv: Kineto JSON joined by ``args.correlation``
(a kernel to its launching runtime or driver call, the call to the ranges around it on its thread),
the compile ranges as Dynamo wrote them, and every Triton kernel name in the fixtures split by hand.
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner

from traceconv.analyses import kernels as K
from traceconv.analyses.common import load
from traceconv.analyses.compiled import Compiled, compiled
from traceconv.analyses.compiled.names import family, fused_ops, kernel_kind, split_ops
from traceconv.analyses.prepare import INPUT_COLUMNS
from traceconv.analyses.source import Source
from traceconv.analyses.summary import as_dict, summarize
from traceconv.cli import main

from .conftest import fixture
from .kineto_truth import load as load_json
from .kineto_truth import to_ns

PT = "planted/h200/pytorch/"
NSYS = "planted/h200/nsys/"
JSONS = ["tx_compile.json", "tx_ro.json", "tx_recompile.json", "tx_recompile.fixed.json"]
SQLITES = ["tx_compile.sqlite", "tx_ro.sqlite", "tx_ro_node.sqlite", "tx_recompile.sqlite"]
LAUNCH_CATS = {"cuda_runtime", "cuda_driver"}
# Every aten operation the fixtures' Triton kernels fuse, as read by hand from their names.
ATEN = {
    *("_to_copy", "_unsafe_view", "add", "addmm", "clone", "embedding", "embedding_dense_backward", "gelu"),
    *("native_dropout", "native_dropout_backward", "native_layer_norm", "native_layer_norm_backward", "relu"),
    *("select", "select_backward", "squeeze", "sum", "t", "threshold_backward", "transpose", "unsqueeze", "view"),
}


def _path(name: str) -> Path:
    return fixture((PT if name.endswith(".json") else NSYS) + name, packed=True)


_CACHE: dict[str, Source] = {}


def _source(name: str) -> Source:
    if name not in _CACHE:
        _CACHE[name] = Source(load(_path(name), columns=INPUT_COLUMNS))
    return _CACHE[name]


def _compiled(name: str) -> Compiled:
    made = compiled(_source(name))
    assert made is not None
    return made


def _triton_names() -> set[str]:
    names = set()
    for name in JSONS:
        names |= {e["name"] for e in load_json(_path(name))["traceEvents"] if e.get("cat") == "kernel"}
    for name in SQLITES:
        with sqlite3.connect(_path(name)) as con:
            sql = "SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName"
            names |= {str(r[0]) for r in con.execute(sql)}
    return {n for n in names if n.startswith("triton_")}


def test_every_triton_kernel_in_the_fixtures_splits_into_the_aten_operations_its_name_joins() -> None:
    names = _triton_names()
    assert len(names) >= 40
    for name in names:
        ops = fused_ops(name)
        assert ops and set(ops) <= ATEN, (name, ops)
        joined = name.split("_fused_", 1)[1].rsplit("_", 1)[0]
        assert "_".join(ops) == joined, name
        assert kernel_kind(name) in ("pointwise", "reduction", "persistent reduction"), name


@pytest.mark.parametrize(
    ("name", "ops"),
    [
        ("triton_poi_fused_add_mul_0", ["add", "mul"]),
        ("triton_poi_fused_addmm_gelu_0", ["addmm", "gelu"]),
        ("triton_per_fused_native_layer_norm_1", ["native_layer_norm"]),
        (
            "triton_per_fused__to_copy_add_clone_native_dropout_native_layer_norm_native_layer_norm_backward_"
            "transpose_view_15",
            [
                *("_to_copy", "add", "clone", "native_dropout", "native_layer_norm", "native_layer_norm_backward"),
                *("transpose", "view"),
            ],
        ),
        ("triton_poi_fused__to_copy__unsafe_view_add_clone_1", ["_to_copy", "_unsafe_view", "add", "clone"]),
        (
            "triton_poi_fused_native_dropout_relu_threshold_backward_view_18",
            ["native_dropout", "relu", "threshold_backward", "view"],
        ),
        ("triton_poi_fused_gelu_gelu_backward_3", ["gelu", "gelu_backward"]),  # an unknown _backward joins its op
        ("triton_tem_fused_mm_0", ["mm"]),
        ("triton_red_fused__log_softmax_2", ["_log_softmax"]),
        ("triton_poi_fused_7", []),  # no operations named
        ("sm90_xmma_gemm_bf16bf16_bf16f32", []),
    ],
)
def test_fused_names_split_greedily_against_aten_names(name: str, ops: list[str]) -> None:
    assert fused_ops(name) == ops


def test_an_unknown_operation_with_a_leading_underscore_stays_one() -> None:
    assert split_ops("_foo_add") == ["_foo", "add"]


def test_families_line_up_eager_operators_and_fused_operations() -> None:
    assert family("aten::native_layer_norm") == family("native_layer_norm") == "layer_norm"
    assert family("aten::addmm") == family("mm") == "mm"
    assert family("_to_copy") == family("aten::copy_") == "copy"
    assert family("aten::add_") == family("add") == "add"
    assert family("native_layer_norm_backward") == "layer_norm_backward"


def _json_truth(name: str, prefix: str) -> dict[str, tuple[int, int]]:
    """Per range name starting with ``prefix``: the kernels launched inside its calls (by the launching
    call's thread and start) and their execution time, from the raw JSON."""
    events = load_json(_path(name))["traceEvents"]
    ranges = [
        e for e in events if str(e.get("name", "")).startswith(prefix) and e.get("cat") in ("user_annotation", "cpu_op")
    ]
    launches = {
        e["args"]["correlation"]: e
        for e in events
        if e.get("cat") in LAUNCH_CATS and "correlation" in e.get("args", {})
    }
    hits: dict[str, dict[int, int]] = defaultdict(dict)
    for i, k in enumerate(e for e in events if e.get("cat") == "kernel"):
        call = launches.get(k["args"].get("correlation"))
        if call is None:
            continue
        at = to_ns(call["ts"])
        for r in ranges:
            start = to_ns(r["ts"])
            if (r["pid"], r["tid"]) == (call["pid"], call["tid"]) and start <= at < start + to_ns(r["dur"]):
                hits[r["name"]][i] = to_ns(k["dur"])
    return {n: (len(h), sum(h.values())) for n, h in hits.items()}


@pytest.mark.parametrize("name", ["tx_compile.json", "tx_ro.json", "tx_recompile.json"])
@pytest.mark.parametrize("prefix", ["## Call CompiledFxGraph", "Torch-Compiled Region", "CompiledFunction"])
def test_each_compiled_regions_gpu_time_is_the_kernels_launched_inside_it(name: str, prefix: str) -> None:
    truth = _json_truth(name, prefix)
    got = {r.name: (r.kernels, r.gpu_ns) for r in _compiled(name).regions if r.name.startswith(prefix)}
    assert got.keys() == truth.keys()
    assert truth or (name, prefix) == ("tx_recompile.json", "CompiledFunction")  # inference: no autograd function
    for region, (kernels, gpu_ns) in truth.items():
        assert got[region][0] == kernels, region
        assert got[region][1] == pytest.approx(gpu_ns, abs=kernels), region


def test_the_compiled_graphs_hold_most_of_a_compiled_steps_gpu_time() -> None:
    made = _compiled("tx_compile.json")
    graphs = sum(r.gpu_ns for r in made.regions if r.kind == "graph")
    assert made.in_regions_ns == graphs  # forward and backward graphs: disjoint, and every region is in one
    assert 0.5 < graphs / made.gpu_ns < 0.8  # the optimizer and the loss run eagerly
    backward = next(r for r in made.regions if r.name == "CompiledFunctionBackward")
    assert backward.kernels > 0 and backward.triton_ns > 0  # launched on autograd's thread, found there


def _compile_truth(name: str) -> list[tuple[int, int]]:
    """Dynamo's outermost compile ranges (entire_frame_compile) from the raw JSON: (start, duration)."""
    events = load_json(_path(name))["traceEvents"]
    return sorted((to_ns(e["ts"]), to_ns(e["dur"])) for e in events if e.get("name") == "entire_frame_compile")


def test_compilations_are_dynamos_frame_compiles_and_name_the_region_each_made() -> None:
    made = _compiled("tx_recompile.json")
    truth = _compile_truth("tx_recompile.json")
    assert len(truth) == 4
    assert [c.dur_ns for c in made.compiles] == pytest.approx([d for _, d in truth], abs=1)
    gaps = [c.start_ns - made.compiles[0].start_ns for c in made.compiles]  # the reader moves the clock to Unix time
    assert gaps == pytest.approx([s - truth[0][0] for s, _ in truth], abs=1)
    assert [c.region for c in made.compiles] == [f"Torch-Compiled Region: 0/{n}" for n in (3, 4, 5, 6)]


@pytest.mark.parametrize("name", ["tx_compile.json", "tx_recompile.fixed.json", "tx_ro.json", "tx_recompile.sqlite"])
def test_no_compilation_where_the_profile_holds_none(name: str) -> None:
    assert _compiled(name).compiles == []


def _summary(name: str) -> dict[str, Any]:
    return as_dict(summarize(_source(name)), 0)


def test_recompiles_is_the_top_finding_and_saves_the_compile_time_of_a_step() -> None:
    d = _summary("tx_recompile.json")
    top = d["findings"][0]
    assert top["code"] == "RECOMPILES" and top["severity"] in ("high", "medium")
    assert top["value"] == 100.0  # every step compiles
    steps = d["steps"]["count"]
    inside = [dur for start, dur in _compile_truth("tx_recompile.json")]
    assert top["saving_ns"] == pytest.approx(sum(inside) / steps, rel=0.01)
    assert "TORCH_LOGS=recompiles" in top["message"] and "mark_dynamic" in top["message"]
    assert "0/3, 0/4, 0/5, 0/6" in top["message"]


@pytest.mark.parametrize("name", ["tx_recompile.fixed.json", "tx_compile.json", "tx_ro.json", "tx_recompile.sqlite"])
def test_no_recompiles_where_nothing_recompiles(name: str) -> None:
    assert "RECOMPILES" not in {f["code"] for f in _summary(name)["findings"]}


def test_summary_json_has_the_compiled_section_and_eager_runs_have_none() -> None:
    d = _summary("tx_compile.json")["compiled"]
    kernels = [e for e in load_json(_path("tx_compile.json"))["traceEvents"] if e.get("cat") == "kernel"]
    assert d["triton_launches"] == sum(1 for e in kernels if e["name"].startswith("triton_")) == 750
    assert d["gpu_ns"] == pytest.approx(sum(to_ns(e["dur"]) for e in kernels), abs=len(kernels))
    assert {r["kind"] for r in d["regions"]} == {"frame", "function", "graph"}
    assert _summary("tx_eager.json")["compiled"] is None


def test_fused_operations_add_up_the_kernels_that_fuse_each() -> None:
    events = load_json(_path("tx_compile.json"))["traceEvents"]
    fused = {f.op: f for f in _compiled("tx_compile.json").fused}
    layer_norm = [
        to_ns(e["dur"]) for e in events if e.get("cat") == "kernel" and "_native_layer_norm_backward_" in e["name"]
    ]
    assert fused["native_layer_norm_backward"].gpu_ns == pytest.approx(sum(layer_norm), abs=len(layer_norm))
    assert fused["native_layer_norm_backward"].launches == len(layer_norm)


def test_kernels_shows_what_each_triton_kernel_fuses_within_the_terminal() -> None:
    rows = K.report(load(_path("tx_recompile.json")), ("kernel",), "name").rows
    by = dict(zip(rows["name"].astype(str), rows["fuses"], strict=True))
    assert by["triton_poi_fused_addmm_gelu_0"] == "addmm, gelu"
    assert all(pd.isna(v) for n, v in by.items() if not n.startswith("triton_"))
    result = CliRunner().invoke(main, ["kernels", str(_path("tx_recompile.json"))], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    assert "addmm, gelu" in result.output
    assert max(len(line) for line in result.output.splitlines()) <= 100


def test_summary_table_shows_regions_fused_operations_and_compilations() -> None:
    result = CliRunner().invoke(main, ["summary", str(_path("tx_recompile.json"))], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    text = result.output
    assert "Compiled program" in text and "4 compilations (Dynamo)" in text and "Torch-Compiled Region: 0/3" in text
    assert "addmm" in text.split("Operations fused by Triton kernels")[1]
    assert max(len(line) for line in text.splitlines()) <= 100


def _diff(before: str, after: str) -> Any:
    from traceconv.analyses.diff import diff

    return diff(_source(before), _source(after))


def test_diff_of_eager_against_compiled_lines_up_what_inductor_fused_per_family() -> None:
    d = _diff("tx_eager.json", "tx_compile.json")
    rows = {f.family: f for f in d.families}
    events = load_json(_path("tx_compile.json"))["traceEvents"]
    steps = d.after.stats.scope.steps
    # layer_norm's forward, fused by Inductor: every Triton kernel whose name holds native_layer_norm (not
    # only its backward), from the raw file (all the compiled run's kernels are launched inside its steps)
    forward = [
        to_ns(e["dur"])
        for e in events
        if e.get("cat") == "kernel"
        and e["name"].startswith("triton_")
        and "native_layer_norm" in e["name"].replace("native_layer_norm_backward", "")
    ]
    ln = rows["layer_norm"]
    assert ln.after_fused_ns == ln.after_ns == pytest.approx(sum(forward) / steps, abs=len(forward))
    assert ln.before_ns > 0 and "add" in ln.fused_with and "dropout" in ln.fused_with
    assert rows["mm"].after_fused_ns == 0 and rows["mm"].before_ns == pytest.approx(rows["mm"].after_ns, rel=0.1)
    assert all(f.before_ns or f.after_ns for f in d.families)


def test_diff_of_two_eager_runs_has_no_families() -> None:
    assert _diff("tx_eager.json", "tx_eager.json").families == []


def test_diff_finds_recompiles_where_the_after_run_recompiles() -> None:
    d = _diff("tx_recompile.fixed.json", "tx_recompile.json")
    assert "RECOMPILES" in {f.code for f in d.after.findings}
    assert "RECOMPILES" not in {f.code for f in d.before.findings}


def test_an_nsys_export_shows_the_fused_operations_and_says_it_has_no_regions() -> None:
    result = CliRunner().invoke(main, ["summary", str(_path("tx_compile.sqlite"))], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    text = result.output.split("Compiled program")[1]
    assert "no compiled region's range in the profile" in " ".join(text.split())
    assert "compilations" not in text.split("Copies")[0]  # no Dynamo ranges: nothing said
    assert "native_layer_norm_backward" in text.split("Copies")[0]
