"""Numbers users can trust (issue 16): a verdict that agrees with the findings, findings with a floor
and advice that fits the program, steps described by their median, and notes where a figure could mislead."""

from __future__ import annotations

import shutil
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import traceconv
from traceconv.analyses.common import load
from traceconv.analyses.diff import as_dict as diff_dict
from traceconv.analyses.diff import diff
from traceconv.analyses.prepare import INPUT_COLUMNS, Program, prepare
from traceconv.analyses.summary import as_dict, summarize
from traceconv.analyses.summary.advice import idle_fix, tiny_fix
from traceconv.cli import main
from traceconv.errors import InputError, UnsupportedFormatError, UsageError

from .conftest import fixture, fixture_files

TRACES = [p for p in fixture_files("pytorch", ("*.json", "*.json.gz"))] + fixture_files("nsys", ("*.sqlite",))
TRACES = [p for p in TRACES if "gpu_metrics" not in p.name]  # 2.3M metric samples: not a summary's business
PYTORCH_ADVICE = ("torch", "pin_memory", ".item()", "DataLoader", "non_blocking")


@cache
def _summary(path: Path) -> dict[str, Any]:
    return as_dict(summarize(load(path, columns=INPUT_COLUMNS), top=0), 0)


@cache
def _program(path: Path) -> Program:
    return prepare(load(path, columns=INPUT_COLUMNS)).program


def _codes(d: dict[str, Any]) -> set[str]:
    return {f["code"] for f in d["findings"]}


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name[:50])
def test_the_verdict_agrees_with_the_findings(path: Path) -> None:
    """A long queue is never a finding (it is what a GPU-bound program looks like); never a
    HOST_DEVICE_COPIES finding for under a millisecond of copies; every verdict explained by the idle
    gaps it names; findings ordered by what their fixes would win."""
    d = _summary(path)
    scope = d["steps"] or d
    bound, gaps = d["bound"], d["idle_gaps"]
    assert "QUEUE_WAIT" not in _codes(d)
    copies = sum(scope["memcpy"][k]["dur_ns"] for k in ("HtoD", "DtoH") if k in scope["memcpy"])
    if copies < 1_000_000:
        assert "HOST_DEVICE_COPIES" not in _codes(d)
    causes = {
        "cpu-bound": gaps["host_ns"],
        "sync-bound": gaps["result_wait_ns"] + gaps["staging_ns"],
        "launch-bound": gaps["launch_ns"],
        "gpu-wait": gaps["queued_ns"],
    }
    if bound["verdict"] in causes and any(causes.values()):
        assert causes[bound["verdict"]] == max(causes.values())
    savings = [f["saving_ns"] for f in d["findings"] if f["saving_ns"] is not None]
    assert savings == sorted(savings, reverse=True)


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name[:50])
def test_the_advice_fits_the_program(path: Path) -> None:
    program = _program(path)
    for f in _summary(path)["findings"]:
        if program.framework != "pytorch":
            assert not any(word in f["message"] for word in PYTORCH_ADVICE), (f["code"], f["message"])
        if program.cuda_graphs:
            assert "as a CUDA graph" not in f["message"] and "torch.compile, CUDA graphs" not in f["message"]


@pytest.mark.sweep  # over every real file, as the two sweeps it vouches for
def test_the_corpus_has_programs_of_both_kinds_and_graph_replays() -> None:
    """The two tests above are not vacuous."""
    programs = [_program(p) for p in TRACES]
    assert {p.framework for p in programs} == {"pytorch", "cuda"}
    assert any(p.cuda_graphs for p in programs)
    assert _program(fixture("nsys/public/PolPuigPuy__OpenACC_Project_PolPuig__report2.sqlite")).framework == "cuda"
    assert _program(fixture("nsys/h200/buggy.sqlite")).framework == "pytorch"  # an nsys export of a PyTorch run


def test_graph_replays_and_cuda_programs_get_their_own_fixes() -> None:
    graphs, cuda = Program("pytorch", cuda_graphs=True), Program("cuda", cuda_graphs=False)
    assert "CUDA graph" not in idle_fix("launch", graphs) and "torch.compile" in idle_fix("launch", graphs)
    assert "CUDA graph" in idle_fix("launch", Program("pytorch", cuda_graphs=False))
    assert "already replays CUDA graphs" in tiny_fix(graphs)
    assert "torch" not in idle_fix("outside_ops", cuda) and "torch" not in tiny_fix(cuda)
    assert "DataLoader" in idle_fix("outside_ops", Program("pytorch", cuda_graphs=False))


def test_the_openacc_export_is_judged_by_cuda_terms() -> None:
    d = _summary(fixture("nsys/public/PolPuigPuy__OpenACC_Project_PolPuig__report2.sqlite"))
    copies = next(f for f in d["findings"] if f["code"] == "HOST_DEVICE_COPIES")
    assert "keep the data on the GPU between kernels" in copies["message"] and "torch" not in copies["message"]


def test_steps_that_match_nothing_say_so() -> None:
    trace = fixture("pytorch/h200/train_buggy.pt.trace.json.gz")
    d = as_dict(summarize(load(trace, columns=INPUT_COLUMNS), step_pattern=r"^no_such_step_\d+$"), 0)
    assert d["steps"] is None and d["findings_scope"] == "window"
    assert d["notes"][0] == "no range matches --steps '^no_such_step_\\\\d+$': measured on the whole profiled window"
    assert d["notes"][1].startswith("without steps, each GPU's busy and idle time is measured from its first work")


def test_a_pytorch_run_against_an_nsys_export_is_compared_with_a_note() -> None:
    before = load(fixture("pytorch/h200/train_buggy.pt.trace.json.gz"), columns=INPUT_COLUMNS)
    after = load(fixture("nsys/h200/fixed.sqlite"), columns=INPUT_COLUMNS)
    notes = diff_dict(diff(before, after))["notes"]
    assert notes[0].startswith("before is pytorch and after nsys: their operators, ranges and kernel names")


def test_a_directory_mixing_sources_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    traceconv.convert(fixture("pytorch/h200/cuda_graph.json"), run / "a.parquet")
    traceconv.convert(fixture("nsys/h200/graph_whole.sqlite"), run / "b.parquet")
    with pytest.raises(UsageError, match="holds inputs of different sources \\(nsys, pytorch\\)"):
        load(run, columns=INPUT_COLUMNS)
    result = CliRunner().invoke(main, ["summary", str(run)])
    assert result.exit_code == 2 and "internal error" not in result.stderr


def test_traces_beside_parquet_files_are_named_not_silently_skipped(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    traceconv.convert(fixture("pytorch/h200/cuda_graph.json"), run / "a.parquet")
    shutil.copy(fixture("pytorch/h200/streams_memcpy.json"), run)
    result = CliRunner().invoke(main, ["summary", str(run)])
    assert result.exit_code == 0, result.output
    assert f"traceconv: note: {run}: read its 1 Parquet file(s); the 1 trace file(s) beside them were not read" in (
        result.stderr
    )


def test_a_directory_of_traces_is_summarised_without_converting_it_first(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    for name in ("cuda_graph.json", "streams_memcpy.json"):
        shutil.copy(fixture(f"pytorch/h200/{name}"), run)
    table = load(run, columns=INPUT_COLUMNS)
    assert table.num_rows == 208 + 417


def test_a_truncated_trace_names_the_command_that_salvages_it(tmp_path: Path) -> None:
    cut = tmp_path / "cut.json"
    cut.write_bytes(fixture("pytorch/h200/streams_memcpy.json").read_bytes()[:60_000])
    result = CliRunner().invoke(main, ["summary", str(cut)])
    assert result.exit_code == 3
    assert f"convert what can be read with `traceconv ingest --salvage {cut}`, then analyse" in result.stderr
    assert "use --salvage" not in result.stderr


def test_read_unified_on_a_trace_names_the_function_that_reads_it() -> None:
    with pytest.raises(UnsupportedFormatError, match=r"is a PyTorch profiler trace.*traceconv\.read\(path\)"):
        traceconv.read_unified(fixture("pytorch/h200/train_buggy.pt.trace.json.gz"))
    with pytest.raises(InputError):
        traceconv.read_unified(fixture("nsys/h200/nsys-stats/fixed.cuda_api_sum.csv"))


def test_summary_and_kernels_name_kernels_alike() -> None:
    """nsys' shortName (`Kernel2`, `elementwise_kernel`) is not what `kernels` shows; one rule for both."""
    path = fixture("nsys/h200/fixed.sqlite")
    summary_lines = CliRunner().invoke(main, ["summary", str(path)], env={"COLUMNS": "200"}).output
    kernels_lines = CliRunner().invoke(main, ["kernels", str(path), "--top", "3"], env={"COLUMNS": "400"}).output
    shown = [line.split("  ")[-1].strip() for line in kernels_lines.splitlines()[2:5]]
    for name in shown:
        assert name.rstrip("…")[:30] in summary_lines, name


def test_summary_sorts_operators_like_key_averages() -> None:
    trace = fixture("pytorch/h200/train_buggy.pt.trace.json.gz")
    for sort, column in (("cpu_self", "cpu_self_ns"), ("self_cpu_time_total", "cpu_self_ns"), ("count", "calls")):
        ops = as_dict(summarize(load(trace, columns=INPUT_COLUMNS), top=0, sort=sort), 0)["top_ops"]
        values = [o[column] for o in ops]
        assert values == sorted(values, reverse=True), sort
    with pytest.raises(UsageError, match="--sort 'nope'"):
        summarize(load(trace, columns=INPUT_COLUMNS), sort="nope")


def test_kernels_by_operator_add_up_to_the_kernels() -> None:
    import traceconv.analyses.kernels as K

    table = traceconv.read(fixture("pytorch/h200/train_buggy.pt.trace.json.gz"))
    by_op, by_name = K.summary(table, by="op"), K.summary(table, by="name")
    assert by_op["count"].sum() == by_name["count"].sum()
    assert by_op["exec_total_ns"].sum() == by_name["exec_total_ns"].sum()
    mm = by_op[by_op["op_name"] == "aten::mm"]
    assert len(mm) == 1 and int(mm["count"].iloc[0]) > 0
