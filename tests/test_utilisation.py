"""Are the SMs fed? GPU metrics per scope, LOW_SM_ACTIVITY and LOW_OCCUPANCY on real traces.

The pair is the real H200 before/after of ``fixtures/nsys/h200-metrics`` (README there):
512 small convolutions per step before, the same arithmetic as one grouped convolution after,
both profiled with ``--gpu-metrics-devices=0``. Truth comes from plain sqlite3 queries on the
exports (``GPU_METRICS`` joined to ``TARGET_INFO_GPU_METRICS``, steps from ``NVTX_EVENTS``),
never from our Parquet.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from traceconv.analyses import metrics as U
from traceconv.analyses.inputs import open_source
from traceconv.analyses.kernels import report as kernel_report
from traceconv.analyses.source import Source
from traceconv.analyses.steps import WARMUP_FACTOR
from traceconv.analyses.summary import Summary, as_dict, summarize
from traceconv.analyses.summary.findings import evaluate
from traceconv.analyses.thresholds import DEFAULTS
from traceconv.cli import main

from .conftest import fixture

SM_AFTER = fixture("nsys/h200-metrics/sm_after.sqlite")
SM_ACTIVE = "SMs Active [Throughput %]"
WARPS = "Compute Warps in Flight [Throughput %]"


def _sm_before() -> Path:
    """``sm_before.sqlite.xz`` (11.7 MB, 30,720 kernels), unpacked once; not in PACKED, so not in the sweeps."""
    return fixture("nsys/h200-metrics/sm_before.sqlite", packed=True)


def _query(path: Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return db.execute(sql, params).fetchall()


def _steps(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The NVTX ranges ``step_N``, a first one over WARMUP_FACTOR x the median left out as warm-up."""
    rows = _query(path, "SELECT start, end FROM NVTX_EVENTS WHERE text GLOB 'step_[0-9]*' AND end IS NOT NULL")
    start, end = (np.array(c, np.int64) for c in zip(*sorted(rows), strict=True))
    dur = end - start
    if len(dur) > 2 and dur[0] > WARMUP_FACTOR * np.median(dur):
        start, end = start[1:], end[1:]
    return start, end


def _samples(path: Path, metric: str) -> tuple[np.ndarray, np.ndarray]:
    rows = _query(
        path,
        "SELECT g.timestamp, g.value FROM GPU_METRICS g JOIN TARGET_INFO_GPU_METRICS i "
        "ON i.typeId = g.typeId AND i.metricId = g.metricId WHERE i.metricName = ? ORDER BY g.timestamp",
        (metric,),
    )
    t, v = zip(*rows, strict=True)
    return np.array(t, np.int64), np.array(v, np.float64)


def _inside(t: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Whether each time lies in one of the intervals (ends included); a loop, to be plainly right."""
    hit = np.zeros(len(t), dtype=bool)
    for s, e in zip(start, end, strict=True):
        hit |= (t >= s) & (t <= e)
    return hit


def _steps_mean(path: Path, metric: str) -> float:
    t, v = _samples(path, metric)
    return float(v[_inside(t, *_steps(path))].mean())


@pytest.fixture(scope="module")
def before() -> Iterator[Summary]:
    with open_source([_sm_before()]) as source:
        yield summarize(source)


@pytest.fixture(scope="module")
def after() -> Iterator[Summary]:
    with open_source([SM_AFTER]) as source:
        yield summarize(source)


@pytest.mark.parametrize("side", ["before", "after"])
@pytest.mark.parametrize(("key", "metric"), [("sm_active_pct", SM_ACTIVE), ("warps_in_flight_pct", WARPS)])
def test_steps_means_equal_the_samples_in_sqlite(side: str, key: str, metric: str, request: Any) -> None:
    s: Summary = request.getfixturevalue(side)
    path = _sm_before() if side == "before" else SM_AFTER
    reported = as_dict(s)["gpu_metrics"]["0"][key]
    assert reported == pytest.approx(_steps_mean(path, metric), abs=1.0)


def test_every_metric_has_a_key_and_the_named_ones_theirs(after: Summary) -> None:
    names = [r[0] for r in _query(SM_AFTER, "SELECT metricName FROM TARGET_INFO_GPU_METRICS")]
    keys = set(after.gpu_metrics["0"])
    assert {"sm_active_pct", "sm_issue_pct", "warps_in_flight_pct", "tensor_active_pct"} <= keys
    assert {"dram_read_pct", "dram_write_pct"} <= keys
    averages = [n for n in names if not n.endswith("[Avg]")]  # [Avg]: sums over the cycles, left out
    assert keys == {U.metric_key(n) for n in averages}
    assert len(keys) == len(averages) < len(names)  # no two metrics share a key
    assert U.metric_key("GPC Clock Frequency [MHz]") == "gpc_clock_frequency_mhz"


def test_metrics_are_in_their_units_in_the_diff() -> None:
    """The clocks are named [MHz] and written in Hz; the [Avg] metrics are sums of warps over the sample's
    cycles, wrapped at 24 bits by nsys 2025.3.1 (diff said gpc_clock_frequency_mhz -41,763,008 and
    compute_warps_in_flight_avg -4,362,466)."""
    result = CliRunner().invoke(main, ["diff", str(_sm_before()), str(SM_AFTER), "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    before, delta = doc["before"]["gpu_metrics"]["0"], doc["delta"]["gpu_metrics"]["0"]
    hz = _query(
        SM_AFTER,
        "SELECT avg(value) FROM GPU_METRICS g JOIN TARGET_INFO_GPU_METRICS i USING (typeId, metricId) "
        "WHERE i.metricName = 'GPC Clock Frequency [MHz]'",
    )[0][0]
    assert 1000 < before["gpc_clock_frequency_mhz"] < 2500 and 1000 < hz / 1e6 < 2500
    assert abs(delta["gpc_clock_frequency_mhz"]) < 100 and abs(delta["sys_clock_frequency_mhz"]) < 100
    assert all(abs(v) <= 100 for k, v in delta.items() if k.endswith("_pct"))
    assert not [k for k in (*before, *delta) if k.endswith("_avg")]
    assert 0 < before["compute_warps_in_flight_avg_warps_per_cycle"] <= 64  # warps per SM per cycle (H200: 64 at most)


def _kernel_share(path: Path) -> float:
    """The share of the steps' time the GPU ran kernels: those launched inside a step, whole."""
    start, end = _steps(path)
    rows = _query(
        path,
        "SELECT r.start, k.end - k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
        "ON r.correlationId = k.correlationId",
    )
    launch, dur = (np.array(c, np.int64) for c in zip(*rows, strict=True))
    return float(dur[_inside(launch, start, end)].sum() / (end - start).sum())


def test_low_sm_activity_before_and_not_after(before: Summary, after: Summary) -> None:
    """SMs Active while the GPU runs kernels: the samples' mean over the kernels' share of the steps
    (512 convolutions of a few µs: the GPU runs kernels 14% of the time, half its SMs idle then)."""
    found = {f.code: f for f in before.findings}
    assert "LOW_SM_ACTIVITY" in found
    f = found["LOW_SM_ACTIVITY"]
    share = _kernel_share(_sm_before())
    assert 0.05 < share < 0.3
    assert f.value == pytest.approx(_steps_mean(_sm_before(), SM_ACTIVE) / share, rel=0.05)
    assert f.threshold == DEFAULTS.LOW_SM_ACTIVITY
    assert "fewer, larger kernels" in f.message and "grouped convolutions" in f.message
    assert "LOW_SM_ACTIVITY" not in {f.code for f in after.findings}


def test_low_sm_activity_threshold_is_overridable(before: Summary) -> None:
    low = DEFAULTS.with_overrides({"low_sm_activity": 5.0})
    codes = {f.code for f in evaluate(before.focus, low, utilisation=before.gpu_metrics)}
    assert "LOW_SM_ACTIVITY" not in codes
    high = DEFAULTS.with_overrides({"LOW_SM_ACTIVITY": 99.0})
    assert "LOW_SM_ACTIVITY" in {f.code for f in evaluate(before.focus, high, utilisation=before.gpu_metrics)}


def test_no_gpu_metrics_no_key_and_no_finding() -> None:
    with open_source([fixture("nsys/h200/fixed.sqlite")]) as source:
        s = summarize(source)
    assert as_dict(s)["gpu_metrics"] == {}
    assert "LOW_SM_ACTIVITY" not in {f.code for f in s.findings}


def _kernel_truth(path: Path, metric: str) -> dict[str, tuple[float, int]]:
    """Per kernel name (demangled): mean and count of the samples inside its executions."""
    t, v = _samples(path, metric)
    rows = _query(
        path,
        "SELECT s.value, k.start, k.end FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName",
    )
    out = {}
    for name in {r[0] for r in rows}:
        spans = np.array([(r[1], r[2]) for r in rows if r[0] == name], np.int64)
        hit = _inside(t, spans[:, 0], spans[:, 1])
        if hit.any():
            out[name] = (float(v[hit].mean()), int(hit.sum()))
    return out


def test_sm_activity_per_kernel_name_against_sqlite() -> None:
    truth = _kernel_truth(SM_AFTER, SM_ACTIVE)
    assert truth  # the grouped convolution runs 1.7 ms: many samples fall inside it
    with open_source([SM_AFTER]) as source:
        rows = kernel_report(source, by="name").rows
    got = rows.set_index(rows["name"].astype(str))
    for name, (mean, n) in truth.items():
        assert got.loc[name, "sm_active_pct"] == pytest.approx(mean, abs=0.01)
        assert got.loc[name, "metric_samples"] == n


def test_per_range_means_cover_the_steps() -> None:
    start, end = _steps(SM_AFTER)
    t, v = _samples(SM_AFTER, SM_ACTIVE)
    with open_source([SM_AFTER]) as source:
        ranges = U.per_range(source).set_index("name")
    for i, (s, e) in enumerate(zip(start, end, strict=True)):
        hit = (t >= s) & (t <= e)
        name = _query(SM_AFTER, "SELECT text FROM NVTX_EVENTS WHERE start = ? AND text GLOB 'step_*'", (int(s),))[0][0]
        if hit.any():
            assert ranges.loc[name, "sm_active_pct"] == pytest.approx(float(v[hit].mean()), abs=0.01), i
            assert ranges.loc[name, "samples"] == int(hit.sum())


def test_kernels_and_summary_text_show_sm_activity() -> None:
    out = CliRunner().invoke(main, ["kernels", str(SM_AFTER)])
    assert out.exit_code == 0, out.output
    assert "SMs active (%)" in out.output
    text = CliRunner().invoke(main, ["summary", str(SM_AFTER)])
    assert text.exit_code == 0, text.output
    assert "GPU metrics, mean of the samples" in text.output and "SMs active %" in text.output


def test_diff_compares_gpu_metrics(before: Summary, after: Summary) -> None:
    from traceconv.analyses.diff import as_dict as diff_dict
    from traceconv.analyses.diff import diff

    with open_source([_sm_before()]) as b, open_source([SM_AFTER]) as a:
        d = diff_dict(diff(b, a))
    sm = d["delta"]["gpu_metrics"]["0"]["sm_active_pct"]
    assert sm == pytest.approx(after.gpu_metrics["0"]["sm_active_pct"] - before.gpu_metrics["0"]["sm_active_pct"])
    assert "LOW_SM_ACTIVITY" in d["delta"]["findings"]["gone"]


# -- LOW_OCCUPANCY on the computed occupancy ----------------------------------------------------
def _source_summary(path: Path) -> Summary:
    with open_source([path]) as source:
        return summarize(source)


def _occupancy_truth(source: Source) -> float:
    """Time-weighted computed occupancy (est, else theoretical) of the non-NCCL kernels, in one query."""
    return float(
        source.scalar(
            "SELECT sum(coalesce(est_occupancy_pct, theoretical_occupancy_pct) * dur_ns) / "
            "sum(dur_ns) FROM events WHERE kind = 'kernel' AND coalesce(est_occupancy_pct, "
            "theoretical_occupancy_pct) IS NOT NULL AND NOT starts_with(lower(name), 'nccl')"
        )
    )


def test_low_occupancy_on_nsys_kernels_says_the_grid_limits_it(before: Summary, after: Summary) -> None:
    found = {f.code: f for f in before.findings}
    assert "LOW_OCCUPANCY" in found  # 4-block GEMMs and 256-block convolutions on 132 SMs
    assert "too few blocks in the grid" in found["LOW_OCCUPANCY"].message
    with open_source([_sm_before()]) as source:
        assert found["LOW_OCCUPANCY"].value == pytest.approx(_occupancy_truth(source), abs=0.01)
    assert "LOW_OCCUPANCY" not in {f.code for f in after.findings}


@pytest.mark.parametrize(
    ("trace", "low"),
    [("pytorch/h200/compiled_triton.json", True), ("pytorch/h200/seed_linear.json", False)],
)
def test_low_occupancy_on_pytorch_traces(trace: str, low: bool) -> None:
    s = _source_summary(fixture(trace))
    codes = {f.code for f in s.findings}
    assert ("LOW_OCCUPANCY" in codes) == low
    assert s.focus.launch.occupancy_limiters  # every kernel's limiter is known
