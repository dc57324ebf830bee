"""CUDA graphs replayed: per graph its launches and work, and the operators that captured its kernels.

Real profiles of a batch-1 decoder replayed from a CUDA graph (``fixtures/planted``, made by
``tests/tools/planted/planted.py``): captured inside the torch.profiler window (``decode_graph_in``)
and before it (``decode_graph``), and under Nsight Systems with graphs traced whole and node by
node. The truths are read from the raw trace here, independently of the readers.
"""

from __future__ import annotations

import json
import lzma
import sqlite3
from collections import defaultdict
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np
import pytest

from traceconv.analyses.common import load
from traceconv.analyses.graphs import Graphs, graphs
from traceconv.analyses.prepare import INPUT_COLUMNS, as_source
from traceconv.analyses.summary import as_dict, summarize
from traceconv.readers.nsys.graph_nodes import node_origins
from traceconv.readers.nsys.sql import Database

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
    assert not one.captured and one.launched_from == "ProfilerStep#*"  # replayed in every step
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


# The conversion: each replayed kernel, copy and memset carries the operator that captured it.


def _raw(path: Path) -> list[dict[str, Any]]:
    opener = lzma.open if path.suffix == ".xz" else open
    with opener(path, "rt") as f:
        events: list[dict[str, Any]] = json.load(f)["traceEvents"]
    return events


def _raw_replays(path: Path) -> tuple[list[tuple[int, float, float, str | None]], dict[int, str]]:
    """From the raw Kineto JSON, each replayed GPU row (correlation, start µs, duration µs, the operator
    that captured it: None without a capture in the profile), and each graph launch's enclosing
    operator or annotation (its correlation -> the innermost one around it on its thread)."""
    events = _raw(path)
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    ran = {e["args"]["correlation"] for e in gpu}
    runtime = sorted((e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")), key=lambda e: e["ts"])
    ops = [e for e in events if e.get("cat") in ("cpu_op", "user_annotation")]
    by_ext = {e["args"]["External id"]: e["name"] for e in ops if e["cat"] == "cpu_op"}
    inst = [e["ts"] for e in runtime if "GraphInstantiate" in e["name"]]
    captured = [
        by_ext.get(e["args"].get("External id"))
        for e in runtime
        if inst and e["ts"] < inst[0] and any(n in e["name"] for n in LAUNCHING) and e["args"]["correlation"] not in ran
    ]
    launches = {e["args"]["correlation"]: e for e in runtime if e["name"] == "cudaGraphLaunch"}
    around = {
        c: min(
            (o for o in ops if o["tid"] == e["tid"] and o["ts"] <= e["ts"] <= o["ts"] + o["dur"]),
            key=lambda o: o["dur"],
        )["name"]
        for c, e in launches.items()
    }
    replays: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in gpu:
        if e["args"]["correlation"] in launches:
            replays[e["args"]["correlation"]].append(e)
    rows = []
    for corr, mine in replays.items():
        mine.sort(key=lambda e: e["ts"])
        cap = captured if len(captured) == len(mine) else [None] * len(mine)
        rows += [(corr, e["ts"], e["dur"], op) for op, e in zip(cap, mine, strict=True)]
    return rows, around


def _converted_replays(path: Path) -> Any:
    import duckdb

    con = duckdb.connect()
    con.register("ev", load(path, columns=INPUT_COLUMNS))
    return con.sql(
        "SELECT k.correlation_id AS corr, k.start_ns, k.dur_ns, CAST(k.op_name AS VARCHAR) AS op, "
        "CAST(l.op_name AS VARCHAR) AS launch_op, CAST(o.name AS VARCHAR) AS op_row_name, o.end_ns AS op_end "
        "FROM ev k JOIN ev l ON l.event_id = k.launch_event_id "
        "LEFT JOIN ev o ON o.event_id = k.op_event_id "
        "WHERE k.kind IN ('kernel', 'memcpy', 'memset') AND k.launch_name LIKE '%GraphLaunch%' "
        "ORDER BY k.correlation_id, k.start_ns"
    ).df()


def _gpu_share(rows: list[tuple[int, float, float, str | None]], ok: Any) -> float:
    return sum(d for _, _, d, op in rows if ok(op)) / sum(d for _, _, d, _ in rows)


def test_conversion_gives_each_replayed_row_the_operator_that_captured_it() -> None:
    path = fixture(PLANTED + "pytorch/decode_graph_in.json", packed=True)
    truth, _ = _raw_replays(FIXTURES / (PLANTED + "pytorch/decode_graph_in.json.xz"))
    got = _converted_replays(path)
    assert len(got) == len(truth) == 12 * 148
    assert _gpu_share(truth, lambda op: op is not None and op.startswith("aten::")) == 1.0
    assert got["op"].tolist() == [op for *_, op in truth]  # row by row, in each replay's order
    assert (got["op"] == got["op_row_name"]).all()  # op_event_id names that operator
    assert (got["op_end"] < got["start_ns"]).all()  # the capture, before the replay
    assert got["launch_op"].str.startswith("ProfilerStep#").all()  # the launch keeps its own


@pytest.mark.parametrize(
    "rel",
    [
        "planted/h200/pytorch/decode_graph.json",
        "planted/h200/pytorch/decode_graph_node.json",
        "pytorch/h200/cuda_graph.json",
    ],
)
def test_without_its_capture_a_replay_keeps_the_operator_around_its_launch(rel: str) -> None:
    """Captured before the profile: the rows stay with the range around the cudaGraphLaunch."""
    raw = FIXTURES / (rel + ".xz") if rel.startswith("planted") else FIXTURES / rel
    truth, around = _raw_replays(raw)
    got = _converted_replays(fixture(rel, packed=rel.startswith("planted")))
    assert len(got) == len(truth) > 0 and all(op is None for *_, op in truth)
    assert got["op"].tolist() == [around[c] for c, *_ in truth]
    assert (got["op"] == got["launch_op"]).all()


def test_ops_own_view_gives_the_replayed_time_to_the_capturing_operators() -> None:
    """``ops``: each aten operator's self GPU time is that of its own launches plus the replayed rows
    it captured; ``--like torch`` (key_averages) leaves the replays unattributed, as torch does."""
    import traceconv
    from traceconv.analyses.key_averages import key_averages, operators

    raw = FIXTURES / (PLANTED + "pytorch/decode_graph_in.json.xz")
    events = _raw(raw)
    truth, _ = _raw_replays(raw)
    by_ext = {e["args"]["External id"]: e["name"] for e in events if e.get("cat") == "cpu_op"}
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    own: dict[str, float] = defaultdict(float)  # GPU µs of the work each operator name launched itself
    for e in gpu:
        name = by_ext.get(e["args"].get("External id"))
        if name is not None:
            own[name] += e["dur"]
    replayed: dict[str, float] = defaultdict(float)
    for *_, d, op in truth:
        replayed[str(op)] += d
    table = traceconv.read(fixture(PLANTED + "pytorch/decode_graph_in.json", packed=True))
    mine = {r.name: r for r in operators(table).rows if r.kind == "op"}
    torch = {r.name: r for r in key_averages(table).rows if r.kind == "op"}
    for name in ("aten::addmm", "aten::native_layer_norm", "aten::gelu", "aten::add"):
        assert replayed[name] > 0
        assert mine[name].self_gpu_ns == pytest.approx((own[name] + replayed[name]) * 1e3, abs=len(gpu))
        assert torch[name].self_gpu_ns == pytest.approx(own[name] * 1e3, abs=len(gpu))


def test_the_summary_operator_table_counts_replays_for_their_capturing_operators() -> None:
    raw = FIXTURES / (PLANTED + "pytorch/decode_graph_in.json.xz")
    truth, _ = _raw_replays(raw)
    s = as_dict(summarize(load(fixture(PLANTED + "pytorch/decode_graph_in.json", packed=True), columns=INPUT_COLUMNS)))
    ops = {o["name"]: o for o in s["top_ops"]}
    replayed = sum(d for *_, d, op in truth if op == "aten::addmm") * 1e3
    addmm = ops["aten::addmm"]
    assert addmm["gpu_self_ns"] >= replayed > 0.5 * sum(d for *_, d, _ in truth) * 1e3
    assert addmm["gpu_total_ns"] >= addmm["gpu_self_ns"]


def test_nsys_replayed_nodes_lead_back_to_the_calls_that_created_them() -> None:
    """Node tracing: each replayed kernel's node, followed through its clones, was created inside a
    launching call (the stream capture's) on the capturing thread, per the raw export."""
    path = fixture("nsys/h200/graph_node.sqlite")
    db = sqlite3.connect(path)
    nodes = [r[0] for r in db.execute("SELECT graphNodeId FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE graphNodeId > 0")]
    calls = db.execute(
        "SELECT r.start, r.end, r.globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
        "WHERE s.value LIKE '%LaunchKernel%'"
    ).fetchall()
    assert nodes and calls
    origins = node_origins(Database(path))
    assert origins is not None
    gtid, time = origins.of(np.array(nodes, dtype=np.int64))
    for g, t in zip(gtid.tolist(), time.tolist(), strict=True):
        inside = [c for c in calls if c[2] == g and c[0] <= t <= c[1]]
        assert len(inside) == 1, (g, t)
    assert (gtid >= 0).all()


NODE_IN = "planted/h100/nsys/decode_graph_in_node.sqlite"
WORK = ("LaunchKernel", "Memcpy", "Memset")


def _nsys_captured(path: Path) -> tuple[list[str | None], list[list[int]]]:
    """From the raw export: the NVTX range around each launch call of the stream capture (between
    cudaStreamBeginCapture and cudaStreamEndCapture on the capturing thread, in order), and each
    replay's GPU rows (correlation id of its cudaGraphLaunch) as their node ids in start order."""
    db = sqlite3.connect(path)
    calls = db.execute(
        "SELECT r.start, r.end, r.globalTid, s.value FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
        "JOIN StringIds s ON s.id = r.nameId ORDER BY r.start"
    ).fetchall()
    begin = next(c for c in calls if c[3].startswith("cudaStreamBeginCapture"))
    end = next(c for c in calls if c[3].startswith("cudaStreamEndCapture"))
    captured = [c for c in calls if begin[0] < c[0] < end[0] and c[2] == begin[2] and any(w in c[3] for w in WORK)]
    ranges = db.execute(
        "SELECT n.start, n.end, coalesce(n.text, s.value) FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
        "WHERE n.end IS NOT NULL AND n.globalTid = ?",
        (begin[2],),
    ).fetchall()

    def around(start: int, stop: int) -> str | None:
        inside = [r for r in ranges if r[0] <= start and r[1] >= stop]
        return max(inside)[2] if inside else None  # the innermost: the latest to start

    ops = [around(c[0], c[1]) for c in captured]
    rows = db.execute(
        "SELECT correlationId, start FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE graphNodeId IS NOT NULL "
        "UNION ALL SELECT correlationId, start FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE graphNodeId IS NOT NULL "
        "ORDER BY 1, 2"
    ).fetchall()
    replays: dict[int, list[int]] = defaultdict(list)
    for corr, start in rows:
        replays[corr].append(start)
    return ops, list(replays.values())


def test_nsys_node_tracing_gives_each_replayed_row_the_operator_that_captured_it() -> None:
    """The decoder's graph captured in the profile's second step under Nsight Systems (node tracing,
    an NVTX range per operator): the i-th row of every replay belongs to the range around the i-th
    launch call of the capture."""
    path = fixture(NODE_IN, packed=True)
    ops, replays = _nsys_captured(path)
    assert len(ops) == 148 and all(op is not None and op.startswith("aten::") for op in ops)
    assert len(replays) == 11 and {len(r) for r in replays} == {148}
    import duckdb

    con = duckdb.connect()
    con.register("ev", load(path, columns=INPUT_COLUMNS))
    got = con.sql(
        "SELECT CAST(k.op_name AS VARCHAR) AS op, CAST(l.op_name AS VARCHAR) AS launch_op FROM ev k "
        "JOIN ev l ON l.event_id = k.launch_event_id WHERE k.kind IN ('kernel', 'memcpy') "
        "AND k.launch_name LIKE '%GraphLaunch%' ORDER BY k.correlation_id, k.start_ns"
    ).df()
    assert got["op"].tolist() == ops * len(replays)
    assert got["launch_op"].str.startswith("step_").all()  # the launch keeps the range around it


def test_nsys_whole_graphs_and_node_tracing_agree_with_the_capture_in_the_profile() -> None:
    """The same program traced whole and node by node: the capture step is a one-off, left out of
    both; the same step time, busy share and findings (none of medium or high severity)."""
    sw, sn = (
        as_dict(summarize(load(fixture(r, packed=True), columns=INPUT_COLUMNS)))
        for r in ("planted/h100/nsys/decode_graph_in_whole.sqlite", NODE_IN)
    )
    for s in (sw, sn):
        assert s["steps"]["count"] == 10  # 12 less the eager warm-up and the capture
        assert not [f["code"] for f in s["findings"] if f["severity"] in ("high", "medium")]
    assert sn["steps"]["median_ns"] == pytest.approx(sw["steps"]["median_ns"], rel=0.05)
    assert sn["bound"]["gpu_busy_pct"] == pytest.approx(sw["bound"]["gpu_busy_pct"], abs=10)


def test_a_long_step_is_left_out_only_when_the_program_captured_or_compiled_in_it() -> None:
    """Hand-made steps (no real profile has a stall mid-way without a capture): ten 1 ms steps and one
    of 50 ms. With a graph capture inside it, it is a one-off, left out; without (a data pipeline
    that stalled once), it stays, an outlier, in the per-step figures."""
    from traceconv.analyses.steps import HostSteps, lived

    ms_ = 1_000_000
    lengths = [ms_] * 5 + [50 * ms_] + [ms_] * 5
    start = np.cumsum([0, *lengths[:-1]]).astype(np.int64)
    host = HostSteps("step_*", [f"step_{k}" for k in range(11)], start, start + np.array(lengths, np.int64))
    captured = lived(host, one_off_at=np.array([start[5] + 10 * ms_], np.int64))
    assert captured.count == 10 and captured.one_offs == [("step_5", 50 * ms_)] and not captured.outliers
    stalled = lived(host, one_off_at=np.array([start[5] - 1], np.int64))  # a capture in the step before
    assert stalled.count == 11 and not stalled.one_offs and stalled.outliers == [("step_5", 50 * ms_)]
    assert lived(host).count == 11
