"""`traceconv perfetto` with several inputs on one timeline, clock offsets, datasets, and the CLI."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from click.testing import CliRunner

import traceconv
from traceconv.cli import main
from traceconv.render.perfetto import export

from .conftest import fixture
from .perfetto_read import Trace, read

BUGGY, FIXED = fixture("nsys/h200/buggy.sqlite"), fixture("nsys/h200/fixed.sqlite")
RANKS = [fixture("pytorch/h200/ddp_rank0.pt.trace.json"), fixture("pytorch/h200/ddp_rank1.pt.trace.json")]


def kernels(trace: Trace, root: str) -> Counter[tuple[str, int, int]]:
    """(name, start, duration) of the kernels in the groups whose name ends with ``[root]``."""
    return Counter(
        (s.name, s.start, s.dur)
        for s in trace.slices
        if s.category == "kernel" and trace.path(s.track)[0].endswith(f"[{root}]")
    )


def table_kernels(path: Path, shift: int = 0) -> Counter[tuple[str, int, int]]:
    t = traceconv.read(path)
    k = t.filter(pa.compute.equal(t["kind"].cast(pa.string()), "kernel"))
    names, starts, durs = (k[c].to_pylist() for c in ("name", "start_ns", "dur_ns"))
    return Counter((n, s + shift, d) for n, s, d in zip(names, starts, durs, strict=True))


@pytest.fixture(scope="module")
def pair(tmp_path_factory: Any) -> Trace:
    out = tmp_path_factory.mktemp("pair") / "pair.pftrace"
    export([BUGGY, FIXED], out, offsets={"fixed": 1_000})
    return read(out)


def test_two_reports_of_one_process_stay_apart(pair: Trace) -> None:
    """buggy and fixed were both pid 496: the second input's process gets a pid of its own."""
    processes = {pair.track_name(u): d.process.pid for u, d in pair.tracks.items() if d.HasField("process")}
    assert processes["python3 [buggy.sqlite]"] == 496
    assert processes["python3 [fixed.sqlite]"] not in (496, None)
    assert pair.problems == []


def test_each_input_keeps_every_kernel_and_its_offset(pair: Trace) -> None:
    assert kernels(pair, "buggy.sqlite") == table_kernels(BUGGY)
    assert kernels(pair, "fixed.sqlite") == table_kernels(FIXED, shift=1_000)


def test_flows_stay_within_their_input(pair: Trace) -> None:
    for a, b in pair.flows.values():
        assert pair.path(a.track)[0].split("[")[-1] == pair.path(b.track)[0].split("[")[-1]


def test_ranks_aligned_by_offsets(tmp_path: Path) -> None:
    out = tmp_path / "job.pftrace"
    export(RANKS, out, offsets={"ddp_rank1.pt.trace.json": -2_500, "ddp_rank0": 7})
    trace = read(out)
    assert trace.problems == []
    assert kernels(trace, RANKS[0].name) == table_kernels(RANKS[0], shift=7)
    assert kernels(trace, RANKS[1].name) == table_kernels(RANKS[1], shift=-2_500)


def test_a_dataset_of_ranks_is_one_input_with_a_group_per_rank(tmp_path: Path) -> None:
    folder = tmp_path / "run.parquet"
    folder.mkdir()
    for rank in RANKS:
        traceconv.convert(rank, folder / (rank.name.split(".")[0] + ".parquet"), workers=0)
    out = tmp_path / "run.pftrace"
    export([folder], out, offsets={"ddp_rank1": 100})
    trace = read(out)
    roots = {trace.path(u)[0] for u in trace.tracks}
    assert {r for r in roots if r.startswith("GPU")} == {
        "GPU 0 [run.parquet · ddp_rank0]",
        "GPU 1 [run.parquet · ddp_rank1]",
    }
    assert kernels(trace, "run.parquet · ddp_rank1") == table_kernels(RANKS[1], shift=100)


def test_an_offset_that_names_nothing_is_refused(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["perfetto", str(BUGGY), "-o", str(tmp_path / "x.pftrace"), "--offset", "rank7=5"]
    )
    assert result.exit_code == 2
    assert "--offset names rank7, which is no input and no trace in them" in result.output
    assert not (tmp_path / "x.pftrace").exists()


def test_an_offset_that_is_no_number_is_refused(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["perfetto", str(BUGGY), "-o", str(tmp_path / "x.pftrace"), "--offset", "buggy"])
    assert result.exit_code == 2
    assert "--offset 'buggy' is not NAME=NS" in result.output


def test_times_before_zero_move_the_whole_timeline_and_say_so(tmp_path: Path) -> None:
    """Perfetto's timestamps are unsigned: an offset (or a relative clock) that puts times below zero
    moves every input by the same amount, so that they stay aligned."""
    out = tmp_path / "x.pftrace"
    first = pa.compute.min(traceconv.read(FIXED)["start_ns"]).as_py()
    back = -(first + 5_000)
    args = ["perfetto", str(BUGGY), str(FIXED), "-o", str(out), "--offset", f"fixed={back}"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "traceconv: note: 5,000 ns added to every time: Perfetto's cannot be negative" in result.output
    trace = read(out)
    assert kernels(trace, "fixed.sqlite") == table_kernels(FIXED, shift=back + 5_000)
    assert kernels(trace, "buggy.sqlite") == table_kernels(BUGGY, shift=5_000)


def test_cli_writes_beside_the_first_input_and_says_what(tmp_path: Path) -> None:
    src = tmp_path / "buggy.sqlite"
    src.write_bytes(BUGGY.read_bytes())
    result = CliRunner().invoke(main, ["perfetto", str(src)])
    assert result.exit_code == 0, result.output
    assert f"-> {tmp_path / 'buggy.pftrace'}" in result.output
    assert "8,225 slices, 11 instants, 0 counter samples, 2,411 flows" in result.output
    assert read(tmp_path / "buggy.pftrace").problems == []


def test_an_output_over_an_input_is_refused(tmp_path: Path) -> None:
    parquet = tmp_path / "buggy.parquet"
    traceconv.convert(BUGGY, parquet)
    before = parquet.read_bytes()
    result = CliRunner().invoke(main, ["perfetto", str(parquet), "-o", str(parquet)])
    assert result.exit_code == 2
    assert "is an input of this command: writing there would destroy it; give -o another name" in result.output
    assert parquet.read_bytes() == before


def test_a_missing_input_is_exit_3(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["perfetto", str(tmp_path / "nope.json"), "-o", str(tmp_path / "x.pftrace")])
    assert result.exit_code == 3
    assert "nope.json: does not exist" in result.output


def test_parquet_and_the_trace_it_came_from_give_the_same_timeline(tmp_path: Path) -> None:
    parquet = tmp_path / "buggy.parquet"
    traceconv.convert(BUGGY, parquet)
    a, b = tmp_path / "a.pftrace", tmp_path / "b.pftrace"
    export([BUGGY], a)
    export([parquet], b)
    assert outline(read(a), "buggy.sqlite") == outline(read(b), "buggy.parquet")


def outline(trace: Trace, label: str) -> list[tuple[Any, ...]]:
    """Every slice with its track's path (the input's label left out), times, arguments and flows."""
    return [
        (
            tuple(p.replace(f"[{label}]", "") for p in trace.path(s.track)),
            s.name,
            s.start,
            s.dur,
            s.depth,
            tuple(sorted(s.args.items())),
            tuple(s.flow_out),
            tuple(s.flow_in),
        )
        for s in trace.slices
    ]


def test_metric_rows_become_one_counter_per_metric_and_gpu(tmp_path: Path) -> None:
    """sm_after.sqlite's GPU_METRICS samples (rows of kind ``metric``: 22 metrics of GPU 0): one
    counter per metric and GPU, named as the metric, its unit the rows' ``unit``, its values the
    rows' ``value`` in time order."""
    path = fixture("nsys/h200-metrics/sm_after.sqlite")
    table = traceconv.read(path)
    rows = table.filter(pc.equal(table["kind"].cast(pa.string()), "metric")).to_pandas()
    rows = rows.sort_values(["start_ns", "event_id"])
    want = {
        (f"GPU {device} [{path.name}]", str(name)): (str(g["unit"].iloc[0]), g["value"].tolist())
        for (device, name), g in rows.groupby(["device", "name"], observed=True)
    }
    out = tmp_path / "m.pftrace"
    export([path], out)
    trace = read(out)
    got = {
        (trace.path(u)[0], trace.track_name(u)): (trace.tracks[u].counter.unit_name, [v for _, v in vals])
        for u, vals in trace.counters.items()
        if trace.tracks[u].counter.unit_name
    }
    assert len(want) == 22 and sum(len(v) for _, v in want.values()) == len(rows) > 0
    assert got == want


def test_small_time_buckets_give_the_same_timeline(tmp_path: Path, monkeypatch: Any) -> None:
    """The writer holds one time bucket at a time: many small ones must not change a slice,
    a lane, a flow or a counter (open slices and running values carry over)."""
    from traceconv.render.perfetto import source

    src = fixture("pytorch/h200/train_buggy.pt.trace.json.gz")
    export([src], tmp_path / "one.pftrace")
    monkeypatch.setattr(source, "BUCKET_ROWS", 500)
    export([src], tmp_path / "many.pftrace")
    one, many = read(tmp_path / "one.pftrace"), read(tmp_path / "many.pftrace")
    label = src.name
    assert sorted(outline(many, label)) == sorted(outline(one, label))
    assert many.counters == one.counters and len(many.counters) == 4
    assert many.problems == []
