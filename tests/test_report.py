"""traceconv report: the aggregates behind its charts (against the analyses that measure the same
thing another way) and the command's output rules. The page in a browser: test_report_browser.py."""

from __future__ import annotations

import subprocess
import sys
from importlib.resources import files
from pathlib import Path

import numpy as np
import pytest

from tests.fixtures import fixture
from traceconv.analyses import summary as SM
from traceconv.analyses import timeline as T
from traceconv.analyses.inputs import open_source
from traceconv.analyses.source import Source
from traceconv.analyses.summary.scopes import GpuWindows
from traceconv.render.report import charts as C

PYTORCH = "pytorch/h200/train_buggy.pt.trace.json.gz"
NSYS = "nsys/h200/buggy.sqlite"
METRICS = "nsys/h200-metrics/sm_after.sqlite"
RANKS = ("pytorch/h200/ddp_rank0.pt.trace.json", "pytorch/h200/ddp_rank1.pt.trace.json")


def _window(src: Source) -> tuple[int, int]:
    s = SM.summarize(src)
    return int(s.window.scope.start_ns[0]), int(s.window.scope.end_ns[0])


@pytest.mark.parametrize("rel", [PYTORCH, NSYS, METRICS])
def test_breakdown_adds_up_and_busy_time_equals_the_summary_sweep(rel: str) -> None:
    with open_source([fixture(rel)]) as src:
        s = SM.summarize(src)
        for scope_stats in (s.window, s.steps):
            if scope_stats is None:
                continue
            scope = scope_stats.scope
            parts = T.breakdown(src, scope.gpu, scope.steps)
            assert [b.device for b in parts] == list(scope_stats.gpu)
            for b in parts:
                busy = b.compute_ns + b.communication_ns + b.copies_ns
                assert busy + b.idle_ns == b.window_ns == scope_stats.gpu[b.device].window_ns
                assert busy == scope_stats.gpu[b.device].busy_ns  # busy.py's sweep, another algorithm
                assert min(b.compute_ns, b.communication_ns, b.copies_ns, b.idle_ns) >= 0


@pytest.mark.parametrize("rel", [PYTORCH, NSYS])
def test_steps_one_by_one_add_up_to_the_steps(rel: str) -> None:
    with open_source([fixture(rel)]) as src:
        s = SM.summarize(src)
        assert s.steps is not None
        scope = s.steps.scope
        whole = T.breakdown(src, scope.gpu, scope.steps)
        assert s.lived is not None
        each = T.step_breakdown(src, s.lived.start_ns, s.lived.end_ns)
    assert len(each) == len(whole) * scope.steps
    assert sorted({b.step for b in each}) == list(range(scope.steps))
    for w in whole:
        mine = [b for b in each if b.label == w.label]
        for field in ("compute_ns", "communication_ns", "copies_ns", "idle_ns", "window_ns"):
            assert sum(getattr(b, field) for b in mine) == getattr(w, field), field
        lived = s.lived  # each step as the program lived it: host range and GPU work
        assert [b.window_ns for b in mine] == [int(z - a) for a, z in zip(lived.start_ns, lived.end_ns, strict=True)]


def test_collectives_are_communication_per_rank() -> None:
    with open_source([fixture(r) for r in RANKS]) as src:
        lo, hi = _window(src)
        parts = T.breakdown(src, GpuWindows((np.array([lo]), np.array([hi]))))
        nccl = src.arrow(
            "SELECT rank, sum(dur_ns) AS d FROM events WHERE kind = 'kernel' AND name ILIKE 'nccl%' GROUP BY 1"
        ).to_pylist()
    assert [b.label for b in parts] == ["rank 0 · GPU 0", "rank 1 · GPU 1"]
    by_rank = {r["rank"]: r["d"] for r in nccl}
    for b in parts:
        assert 0 < b.communication_ns <= by_rank[b.rank]  # exclusive of compute: at most the kernels' time
        assert b.compute_ns > 0


@pytest.mark.parametrize("rel", [PYTORCH, NSYS])
def test_utilisation_buckets_cover_the_busy_time(rel: str) -> None:
    with open_source([fixture(rel)]) as src:
        s = SM.summarize(src)
        t = T.series(src, _window(src))
    assert t.buckets <= T.BUCKETS and t.bucket_ns * t.buckets >= s.window.scope.window_ns
    for line in t.utilisation:
        dev = line.name.removeprefix("GPU ")
        busy = sum(v or 0.0 for v in line.y) * t.bucket_ns / 100
        assert busy == pytest.approx(s.window.gpu[dev].busy_ns, rel=1e-4)
        assert max(v or 0.0 for v in line.y) <= 100.0


def test_copies_over_time_hold_every_byte() -> None:
    with open_source([fixture(PYTORCH)]) as src:
        t = T.series(src, _window(src))
        rows = src.arrow("SELECT copy_kind AS k, sum(bytes) AS b FROM events WHERE kind = 'memcpy' GROUP BY 1")
    total = {r["k"]: int(r["b"]) for r in rows.to_pylist()}
    assert {c.name for c in t.copies} == set(total)
    for c in t.copies:
        assert sum(v or 0.0 for v in c.y) * t.bucket_ns == pytest.approx(total[c.name], rel=1e-3, abs=t.buckets)


def test_memory_series_peak_where_the_summary_says_and_in_the_same_units() -> None:
    """The report's memory chart and table show the summary's peaks (its first time, decimal MB), not
    peaks of their own (issue 46: the report gave another time, in MiB)."""
    with open_source([fixture(PYTORCH)]) as src:
        t = T.series(src, _window(src))
        s = SM.report(SM.summarize(src))
    assert set(s.memory) == {"0", "cpu"}
    for dev, m in s.memory.items():
        line = next(x for x in t.memory if x.name == f"{'host' if dev == 'cpu' else 'GPU ' + dev} allocated")
        assert line.unit == "MB" and max(v or 0.0 for v in line.y) == pytest.approx(
            m.allocated_peak_bytes / 1e6, abs=1e-3
        )
        assert m.peak_ns is not None and 0 <= m.peak_ns - t.start_ns <= t.bucket_ns * t.buckets
        at = int((m.peak_ns - t.start_ns) // t.bucket_ns)
        assert line.y[at] == pytest.approx(m.allocated_peak_bytes / 1e6, abs=1e-3)  # the peak's own bucket
    spec = C.memory(t, s.memory)
    assert spec is not None
    marks = spec["layer"][1]["data"]["values"]
    assert {(p["peak"], p["v"], p["t"]) for p in marks} == {
        (
            f"{'host' if d == 'cpu' else 'GPU ' + d} peak",
            round(m.allocated_peak_bytes / 1e6, 2),
            round(m.peak_offset_ns / 1e6, 6),
        )
        for d, m in s.memory.items()
    }


def test_gpu_metrics_are_the_samples_mean() -> None:
    with open_source([fixture(METRICS)]) as src:
        t = T.series(src, _window(src))
        mean = src.scalar("SELECT avg(value) FROM events WHERE kind = 'metric' AND name = 'SMs Active [Throughput %]'")
    line = next(s for s in t.metrics if s.name == "SMs Active [Throughput %] · GPU 0")
    values = [v for v in line.y if v is not None]
    assert 0 <= min(values) <= mean <= max(values) <= 100
    assert all(s.unit == "%" and any(s.y) for s in t.metrics)


def test_no_metrics_without_metric_rows() -> None:
    with open_source([fixture(PYTORCH)]) as src:
        assert T.series(src, _window(src)).metrics == []


@pytest.mark.parametrize("rel", [PYTORCH, NSYS])
def test_histograms_count_every_kernel(rel: str) -> None:
    with open_source([fixture(rel)]) as src:
        h = {x.name: x for x in T.histograms(src)}
        kernels = src.scalar("SELECT count(*) FROM events WHERE kind = 'kernel'")
        queued = src.scalar("SELECT count(queue_ns) FROM events WHERE kind = 'kernel'")
    assert sum(h["execution"].counts) == kernels
    assert sum(h["queue"].counts) == queued
    assert h["execution"].lo_ns == sorted(h["execution"].lo_ns)


def _traceconv(*args: str | Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "traceconv.cli", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_report_command_writes_one_self_contained_file(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    done = _traceconv("report", fixture(PYTORCH), "-o", out)
    assert done.returncode == 0, done.stderr
    text = out.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    for fetch in ("<script src", "<link ", "@import", "url(http", "<iframe"):
        assert fetch not in text
    assert "HOST_DEVICE_COPIES" in text and "aten::copy_" in text
    assert out.stat().st_size < 3 * 2**20
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]
    again = _traceconv("report", fixture(PYTORCH), "-o", out)  # a report of ours is replaced
    assert again.returncode == 0, again.stderr


def test_report_needs_nothing_a_plain_install_lacks(tmp_path: Path) -> None:
    """The report ships Vega, Vega-Lite and vega-embed: it is written where vl-convert-python (which
    it needed, through an extra a plain `pip install` does not bring) cannot be imported."""
    out = tmp_path / "r.html"
    code = (
        "import sys; sys.modules['vl_convert'] = None\n"  # `import vl_convert` fails, as if not installed
        "from click.testing import CliRunner; from traceconv.cli import main\n"
        f"r = CliRunner().invoke(main, ['report', {str(fixture(NSYS))!r}, '-o', {str(out)!r}])\n"
        "print(r.exit_code, r.output)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.stdout.startswith("0 "), done.stdout + done.stderr
    text = out.read_text(encoding="utf-8")
    for script in ("vega", "vega-lite", "vega-embed"):
        head = (files("traceconv.render.report") / "vendor" / f"{script}.min.js").read_text(encoding="utf-8")[:200]
        assert head in text, script
    assert "sourceMappingURL" not in text


def test_report_refuses_outputs_that_destroy_data(tmp_path: Path) -> None:
    trace = tmp_path / "t.json"
    trace.write_bytes(fixture("pytorch/h200/seed_linear.json").read_bytes())
    before = trace.read_bytes()
    done = _traceconv("report", trace, "-o", trace)
    assert done.returncode == 2 and "is an input" in done.stderr
    assert done.stderr.count("\n") == 1
    assert _traceconv("report", trace, "-o", trace, "--force").returncode == 2
    assert trace.read_bytes() == before
    mine = tmp_path / "notes.html"
    mine.write_text("<html>my notes</html>")
    done = _traceconv("report", trace, "-o", mine)
    assert done.returncode == 2 and "--force" in done.stderr and mine.read_text() == "<html>my notes</html>"
    done = _traceconv("report", trace, "-o", tmp_path / "r.txt")
    assert done.returncode == 2 and ".html" in done.stderr
    folder = tmp_path / "ranks"
    folder.mkdir()
    (folder / "a.json").write_bytes(before)
    assert _traceconv("report", folder, "-o", folder / "r.html").returncode == 2
    assert sorted(p.name for p in folder.iterdir()) == ["a.json"]


def test_a_refused_output_is_refused_before_the_analyses_are_loaded(tmp_path: Path) -> None:
    """The output is checked first: a refused -o answers at once, without importing pandas,
    DuckDB or the analyses (which took a second more)."""
    trace = tmp_path / "t.json"
    trace.write_bytes(fixture("pytorch/h200/seed_linear.json").read_bytes())
    code = (
        "import sys; from click.testing import CliRunner; from traceconv.cli import main; "
        f"r = CliRunner().invoke(main, ['report', {str(trace)!r}, '-o', {str(tmp_path / 'r.txt')!r}]); "
        "print(r.exit_code, sorted(m for m in ('pandas', 'duckdb', 'traceconv.analyses') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split("\n")[0] == "2 []", done.stdout + done.stderr


def test_report_of_a_bad_input_fails_in_one_line_and_writes_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "cut.json"
    bad.write_bytes(fixture("pytorch/h200/seed_linear.json").read_bytes()[:5000])
    out = tmp_path / "r.html"
    done = _traceconv("report", bad, "-o", out)
    assert done.returncode == 3, done.stderr
    assert done.stderr.count("\n") == 1 and str(bad) in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut.json"]
    missing = _traceconv("report", tmp_path / "nope.json", "-o", out)
    assert missing.returncode == 3 and not out.exists()


def test_two_inputs_are_a_diff_unless_together(tmp_path: Path) -> None:
    first, second = fixture(RANKS[0]), fixture(RANKS[1])
    diff = _traceconv("report", first, second, "-o", tmp_path / "d.html")
    assert diff.returncode == 0, diff.stderr
    text = (tmp_path / "d.html").read_text(encoding="utf-8")
    assert "What changed" in text and "Before: " in text and "After: " in text
    one = _traceconv("report", first, second, "--together", "-o", tmp_path / "one.html")
    assert one.returncode == 0, one.stderr
    text = (tmp_path / "one.html").read_text(encoding="utf-8")
    assert "What changed" not in text and "rank 1 · GPU 1" in text


def test_the_charts_over_time_span_the_gpu_work_not_the_set_up_around_it() -> None:
    """seed_linear: 88 ms profiled, of which the GPU works in the last 17 ms (the first call sets up
    cuBLAS): the utilisation chart looks at the GPU's span (issue 46)."""
    from traceconv.render.report import Options, figures

    with open_source([fixture("pytorch/h200/seed_linear.json")]) as src:
        run = figures(src, "seed_linear", Options())
        lo, hi = (
            src.arrow(
                "SELECT min(start_ns) AS lo, max(end_ns) AS hi FROM events WHERE kind IN ('kernel', 'memcpy', 'memset')"
            )
            .to_pylist()[0]
            .values()
        )
    t = run.timeline
    assert t.start_ns == lo and t.start_ns + t.bucket_ns * (t.buckets - 1) < hi <= t.start_ns + t.bucket_ns * t.buckets
    assert (hi - lo) * 4 < run.summary.window_ns  # the profiled window is over four times as long
