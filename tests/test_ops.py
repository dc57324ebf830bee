"""``traceconv ops``: the command, traceconv's own view and its footer, Nsight Systems NVTX operator
ranges, and the tree rules checked against a plain transcription of torch's loops.

torch's numbers themselves are tested against real goldens in ``test_key_averages.py``.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import traceconv
from traceconv.analyses.key_averages import nsys as N
from traceconv.analyses.key_averages import operators
from traceconv.analyses.key_averages import pytorch as P
from traceconv.analyses.key_averages import replay as R
from traceconv.analyses.key_averages import tree as T
from traceconv.analyses.key_averages.events import ANNOTATION, OP, Events
from traceconv.cli import main

from .conftest import fixture

SEED = fixture("key_averages/seed_linear.json")
TRAIN = fixture("key_averages/h200/ka_train.json")
BUGGY = fixture("pytorch/h200/train_buggy.pt.trace.json.gz")
BUGGY_NVTX = fixture("nsys/h200/autograd_nvtx.sqlite")


def run(*args: str) -> Any:
    return CliRunner().invoke(main, ["ops", *map(str, args)])


# -- the command ----------------------------------------------------------------------------------
def test_json_rows_have_the_documented_fields_in_nanoseconds_and_bytes() -> None:
    doc = json.loads(run(SEED, "--like", "torch", "--format", "json").stdout)
    assert doc["view"] == "torch" and doc["source"] == "pytorch" and doc["group_by"] == []
    fields = {"name", "device", "kind", "calls", "self_cpu_ns", "cpu_total_ns", "self_gpu_ns", "gpu_total_ns"}
    fields |= {"cpu_mem_bytes", "self_cpu_mem_bytes", "gpu_mem_bytes", "self_gpu_mem_bytes"}
    assert all(set(r) == fields for r in doc["rows"])
    addmm = next(r for r in doc["rows"] if r["name"] == "aten::addmm")
    assert (addmm["calls"], addmm["self_gpu_ns"], addmm["gpu_mem_bytes"]) == (10, 296225, 39845888)
    assert [r["gpu_total_ns"] for r in doc["rows"]] == sorted((r["gpu_total_ns"] for r in doc["rows"]), reverse=True)
    shaped = json.loads(run(SEED, "--like", "torch", "--format", "json", "--group-by-shape").stdout)
    linear = next(r for r in shaped["rows"] if r["name"] == "aten::linear")
    assert linear["input_shapes"] == "[[128, 1024], [1024, 1024], [1024]]" and shaped["group_by"] == ["input_shapes"]


def test_sort_top_csv_and_markdown() -> None:
    args = ("--like", "torch", "--format", "json", "--sort", "self_cpu_time_total", "--top", "3")
    by_self = json.loads(run(SEED, *args).stdout)
    assert [r["name"] for r in by_self["rows"]] == ["aten::addmm", "Activity Buffer Request", "cudaLaunchKernel"]
    csv = run(SEED, "--format", "csv").output.splitlines()
    assert csv[0].startswith("name,device,kind,calls,self_cpu_ns,cpu_total_ns") and len(csv) == 7
    md = run(SEED, "--format", "markdown").output
    assert md.startswith("# seed_linear.json: operators, traceconv's view, by gpu_total_ns")
    assert "| Name | Self CPU % |" in md and "- Self CPU: 80.535ms here, 74.774ms in torch" in md


def test_every_sort_column_sorts_and_the_cli_loads_no_heavy_module() -> None:
    from traceconv.render import ops as RO
    from traceconv.render.ops_columns import COLUMNS, SORT_CHOICES

    assert set(RO.SORT_KEYS) == set(COLUMNS) and set(RO.TORCH_NAMES.values()) <= set(COLUMNS)
    for choice in SORT_CHOICES:
        assert run(SEED, "--like", "torch", "--sort", choice, "--top", "2").exit_code == 0, choice


def test_a_grouping_the_input_cannot_give_is_said() -> None:
    stacks = run(SEED, "--like", "torch", "--group-by-stack", "3")
    assert stacks.exit_code == 0
    assert "traceconv: note: the input has no Python stacks (torch records them with with_stack=True" in stacks.output
    shapes = run(fixture("key_averages/h200/ka_stack_verbose.json"), "--group-by-shape", "--format", "json")
    assert "no input shapes" not in shapes.output


def test_a_dataset_of_ranks_is_refused_with_the_way_out(tmp_path: Path) -> None:
    out = tmp_path / "run.parquet"
    ranks = [fixture("pytorch/h200/ddp_rank0.pt.trace.json"), fixture("pytorch/h200/ddp_rank1.pt.trace.json")]
    for rank in ranks:
        (tmp_path / "run").mkdir(exist_ok=True)
        (tmp_path / "run" / rank.name).write_bytes(rank.read_bytes())
    assert CliRunner().invoke(main, ["ingest", str(tmp_path / "run"), "-o", str(out)]).exit_code == 0
    result = run(out)
    assert result.exit_code == 2
    assert (
        "the input holds 2 traces (ranks); torch's key_averages() is per process; give one rank's trace"
        in result.output
    )
    one = run(out / next(p.name for p in out.iterdir()), "--like", "torch", "--format", "json")
    assert one.exit_code == 0 and json.loads(one.stdout)["rows"]


@pytest.mark.parametrize(
    "args", [("--like", "torch"), ("--group-by-shape",), ("--like", "torch", "--group-by-stack", "5")]
)
def test_parquet_gives_what_the_trace_gives(tmp_path: Path, args: tuple[str, ...]) -> None:
    """From Parquet, ops reads the arguments only where shapes or stacks need them: same output."""
    trace = fixture("key_averages/h200/ka_stack_verbose.json")
    out = tmp_path / "stack.parquet"
    traceconv.convert(trace, out)
    ours = run(out, *args, "--format", "json").stdout
    assert json.loads(ours)["rows"] == json.loads(run(trace, *args, "--format", "json").stdout)["rows"]


@pytest.fixture(scope="module")
def row_groups(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Real traces converted to Parquet of several row groups (each with dictionaries of its own)."""
    out = tmp_path_factory.mktemp("row_groups")
    files = {}
    for trace in (BUGGY, BUGGY_NVTX):
        files[trace.name] = traceconv.convert(trace, out / f"{trace.name}.parquet").path
        assert pq.ParquetFile(files[trace.name]).metadata.num_row_groups > 1
    return files


@pytest.mark.parametrize("trace", [BUGGY, BUGGY_NVTX], ids=["train_buggy", "autograd_nvtx"])
@pytest.mark.parametrize(
    "args",
    [(), ("--like", "torch"), ("--group-by-shape",), ("--group-by-stack", "3")],
    ids=["own", "torch", "shape", "stack"],
)
def test_parquet_of_several_row_groups_gives_what_the_trace_gives(
    row_groups: dict[str, Path], trace: Path, args: tuple[str, ...]
) -> None:
    """ops joins and groups rows of every row group (it failed with "Unifying differing dictionaries")."""
    ours = run(row_groups[trace.name], *args, "--format", "json")
    assert ours.exit_code == 0, ours.output
    assert json.loads(ours.stdout)["rows"] == json.loads(run(trace, *args, "--format", "json").stdout)["rows"]


# -- traceconv's own view and its footer ----------------------------------------------------------
@pytest.mark.parametrize(
    "trace", [SEED, TRAIN, fixture("pytorch/h200/cuda_graph.json")], ids=["seed_linear", "ka_train", "cuda_graph"]
)
def test_the_footer_explains_every_difference(trace: Path) -> None:
    """Every column of the own view either equals torch's, or differs by what the footer says."""
    result = operators(traceconv.read(trace))
    assert {d.column for d in result.differences} >= {"calls", "self_cpu_ns", "gpu_total_ns", "rows", "gpu_mem_bytes"}
    for d in result.differences:
        assert d.ours - d.torch == d.explained, d
        assert d.explained == 0 or not d.reason.startswith("the same"), d
        assert "no reason traceconv knows" not in d.reason, d
    diff = {d.column: d for d in result.differences}
    said = [float(x.replace(",", "")) for x in re.findall(r"\(([\d.,]+) ms", diff["self_cpu_ns"].reason)]
    assert (diff["self_cpu_ns"].ours - diff["self_cpu_ns"].torch) / 1e6 == pytest.approx(sum(said), abs=0.02)
    kinds = Counter(r.kind for r in result.rows)
    assert diff["rows"].ours == sum(kinds.values()) and set(kinds) <= {"op", "annotation", "memory"}
    assert all(r.device == "cpu" for r in result.rows) and all(r.kind == "runtime" for r in result.runtime)


def test_the_own_view_counts_gpu_time_once() -> None:
    """seed_linear: torch's aten::addmm CUDA total is 496 µs with 200 µs of profiler overhead counted again."""
    rows = {(r.name, r.kind): r for r in operators(traceconv.read(SEED)).rows}
    addmm, top = rows[("aten::addmm", "op")], rows[("model_inference", "annotation")]
    assert addmm.self_gpu_ns == addmm.gpu_total_ns == top.gpu_total_ns == 296225
    assert addmm.self_cpu_ns == addmm.cpu_total_ns  # its API calls and the profiler's work count in it here
    text = run(SEED).output
    assert "CUDA API calls (torch nests them under their operator and subtracts them):" in text
    assert "How this differs from torch's key_averages() (traceconv ops --like torch):" in text


@pytest.mark.parametrize("trace", [BUGGY, BUGGY_NVTX], ids=["train_buggy", "autograd_nvtx"])
def test_the_own_view_gives_self_cuda_shares_and_the_json_s_total(trace: Path) -> None:
    """The own view has no GPU rows: its Self CUDA % and total are of its operators' self GPU time,
    the JSON's self_gpu_total_ns (the table said NaN on every row and 0.000us)."""
    from traceconv.render.ops import _time

    total = json.loads(run(trace, "--format", "json").stdout)["self_gpu_total_ns"]
    assert total > 0
    for fmt in ("table", "markdown"):
        text = run(trace, "--top", "0", "--format", fmt).stdout
        assert f"Self CUDA time total: {_time(total)}" in text and "NaN" not in text
    lines = [line.split(" | ") for line in run(trace, "--top", "0", "--format", "markdown").stdout.splitlines()]
    at = lines[2].index("Self CUDA %")
    shares = [float(cells[at].rstrip("%")) for cells in lines[4:] if len(cells) == len(lines[2])]
    assert sum(shares) == pytest.approx(100, abs=0.5)


# -- Nsight Systems: the operators of --pytorch=autograd-shapes-nvtx ------------------------------
def per_step(ev: Events, step: str, skip: int) -> tuple[int, Counter[str], Counter[str]]:
    """Operators inside the steps (the first ``skip`` left out): calls and GPU time."""
    names = np.array(ev.names, dtype=object)[ev.name]
    ranges = np.isin(ev.what, (OP, ANNOTATION))  # not the GPU side of ProfilerStep annotations
    steps = np.flatnonzero(np.array([bool(re.fullmatch(step, n)) for n in names]) & ranges)[skip:]
    inside = np.zeros(len(ev), bool)
    for i in steps:
        inside |= (ev.start >= ev.start[i]) & (ev.end <= ev.end[i]) & (ev.what == OP)
    calls, gpu = Counter(names[inside].tolist()), Counter()
    for i in np.flatnonzero(inside):
        gpu[names[i]] += int(ev.kernels_ns[i])
    return len(steps), calls, gpu


PAIRS = [
    pytest.param(BUGGY, BUGGY_NVTX, id="train_buggy"),
    pytest.param(
        fixture("key_averages/h200/ka_train_mem.json"),
        fixture("nsys/h200-extra/train_autograd_nvtx.sqlite"),
        id="ka_train_mem",
    ),
]


@pytest.mark.parametrize(("trace", "export"), PAIRS)
def test_nvtx_operator_ranges_give_the_trace_s_operators(trace: Path, export: Path) -> None:
    """The same workload profiled by torch.profiler and by nsys: per step, every operator of the
    trace is in the export as often; GPU time per step of the busiest operators agrees within 20%.
    The export's first step is left out: it is the run's first, with the optimizer's set-up,
    which the trace's profiling schedule skipped."""
    n_t, calls_t, gpu_t = per_step(P.events(traceconv.read(trace)), r"ProfilerStep\*", 0)
    n_n, calls_n, gpu_n = per_step(N.events(traceconv.read(export)), r"step_\d+", 1)
    assert n_t >= 2 and n_n >= 4
    assert len(calls_t) > 100
    assert {k: v / n_t for k, v in calls_t.items()} == {k: calls_n[k] / n_n for k in calls_t}
    for name, ns in gpu_t.most_common(5):
        assert gpu_n[name] / n_n == pytest.approx(ns / n_t, rel=0.2), name


def test_the_nsys_table_is_sensible() -> None:
    doc = json.loads(run(BUGGY_NVTX, "--like", "torch", "--format", "json", "--group-by-shape").stdout)
    assert doc["source"] == "nsys"
    rows = doc["rows"]
    assert all(0 <= r["self_cpu_ns"] <= r["cpu_total_ns"] for r in rows if r["device"] == "cpu")
    assert all(0 <= r["self_gpu_ns"] <= r["gpu_total_ns"] for r in rows)
    mm = [r for r in rows if r["name"] == "aten::mm"]
    assert mm and all(re.fullmatch(r"\[\[\d+, \d+\], \[\d+, \d+\]\]", r["input_shapes"]) for r in mm)
    launched = sum(r["self_gpu_ns"] for r in rows if r["device"] == "cpu")
    gpu = sum(r["self_gpu_ns"] for r in rows if r["device"] == "cuda")
    assert 0.9 * gpu < launched <= gpu  # nearly all GPU work runs inside an operator range


# -- the tree rules, against torch's own loops ----------------------------------------------------
def torch_children(thread: list[int], start: list[int], end: list[int]) -> list[int]:
    """EventList._populate_cpu_children, transcribed: events already in list order."""
    parent = [-1] * len(start)
    for th in sorted(set(thread)):
        current: list[int] = []
        for i in [k for k in range(len(start)) if thread[k] == th]:
            while current:
                top = current[-1]
                if start[i] >= end[top] or end[i] > end[top]:
                    current.pop()
                else:
                    parent[i] = top
                    break
            current.append(i)
    return parent


intervals = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 40), st.integers(0, 12)), min_size=1, max_size=60).map(
    lambda xs: sorted(((t, s, s + d) for t, s, d in xs), key=lambda x: (x[1], -x[2]))
)


@settings(max_examples=150, deadline=None)
@given(intervals)
def test_cpu_parents_follow_torch_s_loop(events: list[tuple[int, int, int]]) -> None:
    """Nested, touching, zero-length, identical and partly overlapping intervals (hand-made by
    hypothesis: the partial overlaps no real trace of ours has take the event-by-event path)."""
    thread, start, end = (np.array(v, np.int64) for v in zip(*events, strict=True))
    assert T.parents(thread, start, end).tolist() == torch_children(thread.tolist(), start.tolist(), end.tolist())


def torch_dedup(parent: list[int], name: list[int], kernels: list[int]) -> tuple[list[bool], list[int], list[int]]:
    """EventList._remove_dup_nodes, transcribed (one pass suffices: children follow parents)."""
    children: dict[int, list[int]] = {i: [] for i in range(len(parent))}
    for i, p in enumerate(parent):
        if p >= 0:
            children[p].append(i)
    par, kern, gone = list(parent), list(kernels), [False] * len(parent)
    for i in range(len(parent)):
        p = par[i]
        if p >= 0 and name[p] == name[i] and len(children[p]) == 1:
            children[p] = children[i]
            kern[p] = kern[i]
            for c in children[i]:
                par[c] = p
            gone[i] = True
    return gone, [-1 if g else p for g, p in zip(gone, par, strict=True)], kern


@settings(max_examples=150, deadline=None)
@given(intervals, st.lists(st.integers(0, 2), min_size=60, max_size=60))
def test_folding_repeats_follows_torch(events: list[tuple[int, int, int]], names: list[int]) -> None:
    thread, start, end = (np.array(v, np.int64) for v in zip(*events, strict=True))
    parent = T.parents(thread, start, end)
    name = np.array(names[: len(parent)], np.int64)
    kernels = np.arange(len(parent), dtype=np.int64) * 10
    folded, new_parent, kernels_of, _ = T.merge_repeats(parent, name)
    gone, par, kern = torch_dedup(parent.tolist(), name.tolist(), kernels.tolist())
    assert folded.tolist() == gone and new_parent.tolist() == par
    assert [kernels[k] for k, g in zip(kernels_of, gone, strict=True) if not g] == [
        k for k, g in zip(kern, gone, strict=True) if not g
    ]
    totals = T.subtree_sums(new_parent, np.where(folded, 0, kernels[kernels_of]))
    for i in np.flatnonzero(~folded):  # device total: own kernels plus the children's totals
        kids = np.flatnonzero(new_parent == i)
        assert totals[i] == kernels[kernels_of[i]] + totals[kids].sum()


def test_the_replay_closes_what_torch_closes() -> None:
    """Hand-made (no real trace isolates it): torch's build_tree closes a range when an event
    starts strictly after its end, and everything pushed after a closed range closes with it."""
    # 0: op [0, 10]; 1: GPU annotation [5, 20] (pushed onto 0); 2: event at 10 (0 still open);
    # 3: event at 12 (0 closed, and 1 with it); 4: zero-length at 12, never pushed.
    start = np.array([0, 5, 10, 12, 12, 13], np.int64)
    end = np.array([10, 20, 11, 14, 12, 14], np.int64)
    assert R.parents(start, end).tolist() == [-1, 0, 1, -1, 3, 3]
