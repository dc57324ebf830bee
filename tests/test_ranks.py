"""``traceconv ranks`` on real multi-rank data, checked against the raw files read independently.

The DDP pair (two H200s over NCCL, rank 0 profiled one all-reduce more than rank 1), HTA's
two-rank sample (128-rank job, NCCL send/recv), and a two-process Nsight Systems export. The
expected figures are computed here from the JSON (``json``) and the SQLite (``sqlite3``), with a
union written for the test, not from our Parquet.
"""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from traceconv.analyses import ranks as R
from traceconv.analyses.inputs import open_source
from traceconv.analyses.ranks import units as U
from traceconv.analyses.ranks.calls import bus_factor
from traceconv.cli import main

from .conftest import fixture

DDP = ("pytorch/h200/ddp_rank0.pt.trace.json", "pytorch/h200/ddp_rank1.pt.trace.json")
HTA = tuple(
    f"pytorch/public/facebookresearch__HolisticTraceAnalysis__tests_data_trace_filter_sampled_rank-{r}.json.gz"
    for r in (0, 1)
)
NSYS = "nsys/public/GindaChen__nsys-ai__mfu_2gpu_before.sqlite"
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def _rank_dir(tmp_path: Path, names: Iterable[str]) -> Path:
    d = tmp_path / "ranks"
    d.mkdir(parents=True)
    for name in names:
        shutil.copy(fixture(name), d / Path(name).name)
    return d


def _analyse(*paths: Path) -> R.RanksReport:
    with open_source(list(paths)) as src:
        return R.analyse(src)


def _length(intervals: list[tuple[float, float]]) -> float:
    total, reach = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e > reach:
            total += e - max(s, reach)
            reach = e
    return total


def _overlap(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    return _length(a) + _length(b) - _length(a + b)


def _expected(rows: list[tuple[float, float, str, bool]]) -> dict[str, float]:
    """compute/comm/overlap from (start, end, category, is_comm) in ns."""
    comm = [(s, e) for s, e, c, x in rows if c == "kernel" and x]
    compute = [(s, e) for s, e, c, x in rows if c == "kernel" and not x]
    comm_ns = _length(comm)
    window_ns = max(e for _, e, _, _ in rows) - min(s for s, _, _, _ in rows)
    return {
        "window_ns": window_ns,
        "idle_ns": window_ns - _length([(s, e) for s, e, _, _ in rows]),
        "compute_ns": _length(compute),
        "comm_ns": comm_ns,
        "overlap_pct": _overlap(comm, compute) * 100 / comm_ns if comm_ns else 0.0,
    }


def _from_json(path: Path) -> tuple[int, dict[str, float]]:
    opener: Any = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        doc = json.load(fh)
    rows = []
    for e in doc["traceEvents"]:
        if str(e.get("cat", "")).lower() in GPU_CATS and "dur" in e:
            s = float(e["ts"]) * 1000
            comm = "nccl" in e["name"].lower() or "Collective name" in e.get("args", {})
            rows.append((s, s + float(e["dur"]) * 1000, e["cat"].lower(), comm))
    return int(doc["distributedInfo"]["rank"]), _expected(rows)


def _close(r: R.RankRow, want: dict[str, float]) -> None:
    assert r.window_ns == pytest.approx(want["window_ns"], rel=0.01)
    assert r.compute_ns == pytest.approx(want["compute_ns"], rel=0.01)
    assert r.comm_ns == pytest.approx(want["comm_ns"], rel=0.01)
    assert r.idle_ns == pytest.approx(want["idle_ns"], rel=0.01)
    assert r.overlap_pct is not None and abs(r.overlap_pct - want["overlap_pct"]) <= 1.0


@pytest.mark.parametrize("names", [DDP, HTA], ids=["ddp", "hta"])
def test_pytorch_ranks_equal_the_raw_json(tmp_path: Path, names: tuple[str, str]) -> None:
    report = _analyse(_rank_dir(tmp_path, names))
    expected = dict(_from_json(fixture(n)) for n in names)
    assert [r.rank for r in report.ranks] == sorted(expected)
    for r in report.ranks:
        assert r.device == r.rank  # each rank on its own GPU
        _close(r, expected[int(r.rank or 0)])


def test_nsys_processes_equal_the_raw_sqlite() -> None:
    path = fixture(NSYS)
    con = sqlite3.connect(path)
    pid = "globalPid / 16777216 % 16777216"
    gpu = con.execute(
        f"SELECT {pid}, deviceId, k.start, k.end, 'kernel', lower(s.value) LIKE '%nccl%' "
        "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName "
        f"UNION ALL SELECT {pid}, deviceId, start, end, 'copy', 0 FROM CUPTI_ACTIVITY_KIND_MEMCPY "
        f"UNION ALL SELECT {pid}, deviceId, start, end, 'copy', 0 FROM CUPTI_ACTIVITY_KIND_MEMSET"
    ).fetchall()
    report = _analyse(path)
    assert len(report.ranks) == 2 and {r.device for r in report.ranks} == {0, 1}
    for r in report.ranks:
        assert r.rank is None and r.label.endswith(f":{r.pid}")
        rows = [(float(s), float(e), c, bool(x)) for pid, dev, s, e, c, x in gpu if pid == r.pid and dev == r.device]
        _close(r, _expected(rows))
    assert len(report.collectives) == 33 and report.unmatched == 0  # 33 send/recv kernels on each process


def test_collectives_matched_on_what_the_ranks_share(tmp_path: Path) -> None:
    """Rank 0 profiled one all-reduce more than rank 1: four matched, one counted, none guessed."""
    report = _analyse(_rank_dir(tmp_path, DDP))
    assert [r.collectives for r in report.ranks] == [5, 4]
    assert len(report.collectives) == 4 and report.unmatched == 1
    docs = [json.loads(fixture(n).read_text()) for n in DDP]
    sizes = [
        [
            e["args"]["In msg nelems"]
            for e in d["traceEvents"]
            if e.get("cat") == "kernel" and "In msg nelems" in e["args"]
        ]
        for d in docs
    ]
    assert sizes[0] == sizes[1] == [c.in_nelems for c in report.collectives]
    for c in report.collectives:
        assert c.collective == "allreduce" and c.dtype == "Float" and c.group_size == 2
        assert c.bytes == 4 * (c.in_nelems or 0) and c.algorithm == "RING_LL"
        assert c.skew_ns == abs(c.start_ns["0"] - c.start_ns["1"])
        assert c.last_rank == "1" and c.time_ns == c.dur_ns["1"]  # rank 0 waits in its all-reduce
        assert c.algbw_gbps == pytest.approx((c.bytes or 0) / c.time_ns, rel=1e-3)
        assert c.busbw_gbps == pytest.approx(c.algbw_gbps * 2 * (2 - 1) / 2, rel=1e-3)
    zero, one = report.ranks
    assert one.last_arrivals == 4 and zero.wait_ns > 0 and one.wait_ns == 0
    # rank 1 computes no longer than rank 0 but keeps it waiting: a straggler by its arrivals
    assert one.compute_ns < zero.compute_ns
    (late,) = report.stragglers
    assert late.label == "1" and late.basis == "arrival" and late.time_ns == round(zero.wait_ns / one.steps)
    assert late.median_ns == round((zero.step_ns or 0) / 2 + (one.step_ns or 0) / 2)
    assert "STRAGGLER" in {f.code for f in report.findings}


def test_bus_factors_are_nccl_tests() -> None:
    assert bus_factor("allreduce", 8) == pytest.approx(2 * 7 / 8)
    for name in ("allgather", "_allgather_base", "reduce_scatter_tensor", "all_to_all", "alltoall_base"):
        assert bus_factor(name, 8) == pytest.approx(7 / 8)
    for name in ("broadcast", "reduce", "send", "recv", "sendrecv"):
        assert bus_factor(name, 8) == 1.0


def _shifted(src: Path, dst: Path, shift_us: float) -> None:
    doc = json.loads(src.read_text())
    for e in doc["traceEvents"]:
        if "ts" in e:
            e["ts"] = float(e["ts"]) + shift_us
    dst.write_text(json.dumps(doc))


def test_a_known_clock_shift_is_recovered(tmp_path: Path) -> None:
    """Rank 1 of the real pair moved 1.234567 s later: its offset is that, to a few µs, and skews stay."""
    plain = _analyse(_rank_dir(tmp_path, DDP))
    d = tmp_path / "shifted"
    d.mkdir()
    shutil.copy(fixture(DDP[0]), d / "ddp_rank0.pt.trace.json")
    _shifted(fixture(DDP[1]), d / "ddp_rank1.pt.trace.json", 1_234_567.0)
    moved = _analyse(d)
    assert abs(plain.clock_offsets_ns["1"] or 0) < 5_000  # one host, one clock
    assert moved.clock_offsets_ns["1"] == pytest.approx(-1_234_567_000, abs=5_000)
    assert [c.skew_ns for c in moved.collectives] == pytest.approx([c.skew_ns for c in plain.collectives], abs=5_000)
    assert [c.last_rank for c in moved.collectives] == [c.last_rank for c in plain.collectives]


@pytest.mark.parametrize("names", [DDP, HTA, (NSYS,), DDP[:1]], ids=["ddp", "hta", "nsys", "one"])
def test_the_count_of_ranks_is_that_of_units(tmp_path: Path, names: tuple[str, ...]) -> None:
    """``summary`` asks how many ranks there are without finding out who each one is."""
    with open_source([_rank_dir(tmp_path, names)]) as src:
        assert U.count(src) == len(U.units(src)) == (1 if len(names) == 1 and names != (NSYS,) else 2)
        assert R.several(src) == (U.count(src) > 1)


def test_one_rank_has_no_collectives_to_match() -> None:
    report = _analyse(fixture(DDP[0]))
    assert len(report.ranks) == 1 and report.collectives == [] and report.unmatched == 5
    assert report.findings == [] and report.stragglers == [] and report.clock_offsets_ns == {}


def test_cli_json_keys(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["ranks", str(_rank_dir(tmp_path, DDP)), "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert {"ranks", "collectives", "clock_offsets_ns", "stragglers"} <= set(doc)
    need = {"rank", "device", "window_ns", "compute_ns", "comm_ns", "copy_ns", "idle_ns", "overlap_pct"}
    assert all(need <= set(r) for r in doc["ranks"]) and len(doc["collectives"]) == 4
    text = CliRunner().invoke(main, ["ranks", str(tmp_path / "ranks")])
    assert text.exit_code == 0 and "allreduce" in text.stdout and "LOW_OVERLAP" in text.stdout


def test_findings_follow_thresholds(tmp_path: Path) -> None:
    """HTA's sample: rank 1 computes 12.8% more per step than rank 0, arrives last at 7 of 10, and
    rank 0 waits for it 30.8% of the median step: flagged at 10 by compute, at 20 by arrival, not at 35."""
    d = _rank_dir(tmp_path, HTA)
    with open_source([d]) as src:
        reports = {v: R.analyse(src, thresholds=R.DEFAULTS.with_overrides({"STRAGGLER": v})) for v in (10, 20, 35)}
    assert [(s.label, s.basis, s.last_arrivals) for s in reports[10].stragglers] == [("1", "compute per step", 7)]
    assert [(s.label, s.basis, s.over_pct) for s in reports[20].stragglers] == [("1", "arrival", 30.8)]
    assert reports[35].stragglers == []
    codes = {v: {f.code for f in r.findings} for v, r in reports.items()}
    assert "STRAGGLER" in codes[10] and "STRAGGLER" in codes[20] and "STRAGGLER" not in codes[35]


def test_summary_of_several_ranks_shows_them_rank_by_rank(tmp_path: Path) -> None:
    d = _rank_dir(tmp_path, DDP)
    text = CliRunner().invoke(main, ["summary", str(d)])
    assert text.exit_code == 0, text.output
    assert "rank 0 (GPU 0): window" in text.stdout and "rank 1 (GPU 1): window" in text.stdout
    assert "GPU 0: busy" not in text.stdout and "LOW_OVERLAP" in text.stdout
    doc = json.loads(CliRunner().invoke(main, ["summary", str(d), "--format", "json"]).stdout)
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    alone = json.loads(CliRunner().invoke(main, ["summary", str(fixture(DDP[0])), "--format", "json"]).stdout)
    assert "ranks" not in alone and "LOW_OVERLAP" not in {f["code"] for f in alone["findings"]}


def test_diff_of_two_multi_rank_runs_goes_rank_by_rank(tmp_path: Path) -> None:
    """The DDP pair against HTA's two-rank sample: each rank's per-step figures are its own `ranks` figures."""
    ddp, hta = _rank_dir(tmp_path / "a", DDP), _rank_dir(tmp_path / "b", HTA)
    result = CliRunner().invoke(main, ["diff", str(ddp), str(hta), "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    before, after = _analyse(ddp), _analyse(hta)
    assert [r["label"] for r in doc["ranks"]] == ["0", "1"]
    for change, b, a in zip(doc["ranks"], before.ranks, after.ranks, strict=True):
        assert change["per"] == "step"
        assert b.in_steps is not None and a.in_steps is not None
        assert change["before"]["comm_ns"] == round(b.in_steps.comm_ns / b.steps)
        assert change["after"]["compute_ns"] == round(a.in_steps.compute_ns / a.steps)
        assert change["delta"]["step_ns"] == (a.step_ns or 0) - (b.step_ns or 0)
    assert "STRAGGLER" in {k["code"] for k in doc["delta"]["findings"]["kept"]}  # both runs have one
    single = CliRunner().invoke(main, ["diff", str(fixture(DDP[0])), str(fixture(DDP[1])), "--format", "json"])
    assert "ranks" not in json.loads(single.stdout)
