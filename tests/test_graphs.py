"""CUDA graphs replayed: per graph its launches and work, and the operators that captured its kernels.

Real profiles of a batch-1 decoder replayed from a CUDA graph (``fixtures/planted``, made by
``tests/tools/planted/planted.py``): captured inside the torch.profiler window (``decode_graph_in``)
and before it (``decode_graph``), and under Nsight Systems with graphs traced whole and node by
node. The truths are read from the raw trace here, independently of the readers.
"""

from __future__ import annotations

import json
import lzma
from collections import defaultdict
from pathlib import Path
from statistics import median
from typing import Any

import pytest

from traceconv.analyses.common import load
from traceconv.analyses.graphs import Graphs, graphs
from traceconv.analyses.prepare import INPUT_COLUMNS, as_source
from traceconv.analyses.summary import as_dict, summarize

from .conftest import FIXTURES, fixture

PLANTED = "planted/h200/"
LAUNCHING = ("LaunchKernel", "Memcpy", "Memset")


def _graphs(rel: str) -> Graphs | None:
    return graphs(as_source(load(fixture(PLANTED + rel, packed=True), columns=INPUT_COLUMNS)))


def _raw_captured(rel: str) -> tuple[dict[str, tuple[int, float]], int]:
    """From the raw Kineto JSON: each capturing operator's kernels and GPU µs per replay, and the
    replays. A captured launch is a launching runtime call whose correlation no GPU event carries,
    made before the cudaGraphInstantiate; the i-th row of a replay (by start) is its i-th one."""
    with lzma.open(FIXTURES / (PLANTED + rel + ".xz"), "rt") as f:
        events = json.load(f)["traceEvents"]
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    ran = {e["args"]["correlation"] for e in gpu}
    runtime = sorted((e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")), key=lambda e: e["ts"])
    inst = min(e["ts"] for e in runtime if "GraphInstantiate" in e["name"])
    ops = {
        e["args"]["External id"]: e["name"] for e in events if e.get("cat") == "cpu_op" and "External id" in e["args"]
    }
    captured = [
        ops.get(e["args"].get("External id"), "(no operator)")
        for e in runtime
        if e["ts"] < inst and any(n in e["name"] for n in LAUNCHING) and e["args"]["correlation"] not in ran
    ]
    launches = {e["args"]["correlation"] for e in runtime if e["name"] == "cudaGraphLaunch"}
    replays: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in gpu:
        if e["args"]["correlation"] in launches:
            replays[e["args"]["correlation"]].append(e)
    per_op: dict[str, list[float]] = defaultdict(list)
    for rows in replays.values():
        rows.sort(key=lambda e: e["ts"])
        assert len(rows) == len(captured)
        sums: dict[str, float] = defaultdict(float)
        for op, e in zip(captured, rows, strict=True):
            sums[op] += e["dur"]
        for op, v in sums.items():
            per_op[op].append(v)
    return {op: (captured.count(op), median(v)) for op, v in per_op.items()}, len(replays)


def test_each_replayed_kernel_belongs_to_the_operator_that_captured_it() -> None:
    truth, replays = _raw_captured("pytorch/decode_graph_in.json")
    g = _graphs("pytorch/decode_graph_in.json")
    assert g is not None and len(g.graphs) == 1
    (one,) = g.graphs
    assert one.captured and one.launches == replays
    assert g.attributed_gpu_ns == g.replayed_gpu_ns
    got = {c.name: c for c in one.captured_by}
    assert set(got) == set(sorted(truth, key=lambda k: -truth[k][1])[: len(got)])
    for name, c in got.items():
        kernels, us = truth[name]
        assert c.kernels == kernels
        assert c.ns_per_replay == pytest.approx(us * 1e3, abs=1)
    assert {"aten::addmm", "aten::native_layer_norm", "aten::gelu"} <= set(got)


def test_a_graph_captured_before_the_profile_keeps_the_range_around_its_launch() -> None:
    g = _graphs("pytorch/decode_graph.json")
    assert g is not None and g.attributed_gpu_ns == 0
    (one,) = g.graphs
    assert not one.captured and one.launched_from and one.launched_from.startswith("ProfilerStep#")
    assert one.rows_per_replay and one.longest and one.longest[0].ns_per_replay > 0


def test_nsys_whole_graphs_and_node_tracing_agree() -> None:
    """Two runs of one program: graphs traced whole, then node by node. Per replay, the same work;
    per step, the same step time and busy share (node tracing costs a little per node)."""
    whole, node = _graphs("nsys/decode_graph.sqlite"), _graphs("nsys/decode_graph_node.sqlite")
    assert whole is not None and node is not None and whole.whole and not node.whole
    (w,), (n,) = whole.graphs, node.graphs
    assert w.rows_per_replay is None and n.rows_per_replay == 148
    assert w.launches == n.launches
    assert n.gpu_ns_per_replay == pytest.approx(w.gpu_ns_per_replay, rel=0.03)
    sw, sn = (
        as_dict(summarize(load(fixture(PLANTED + r, packed=True), columns=INPUT_COLUMNS)))
        for r in ("nsys/decode_graph.sqlite", "nsys/decode_graph_node.sqlite")
    )
    assert sn["steps"]["median_ns"] == pytest.approx(sw["steps"]["median_ns"], rel=0.05)
    assert sn["graphs"]["graphs"][0]["launches"] == sw["graphs"]["graphs"][0]["launches"]


def test_no_graph_no_section() -> None:
    assert _graphs("pytorch/tiny_gemms.fixed.json") is None


def test_the_summary_table_names_the_capturing_operators(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from traceconv.cli import main

    r = CliRunner().invoke(main, ["summary", str(fixture(PLANTED + "pytorch/decode_graph_in.json", packed=True))])
    assert r.exit_code == 0, r.output
    assert "CUDA graphs replayed" in r.output and "100% of it by capturing operator" in r.output
    assert "aten::addmm x61" in r.output
