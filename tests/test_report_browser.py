"""traceconv report in a real browser: headless Chromium opens each report from disk with no
console error or warning, no uncaught exception and no request but the file itself, draws every
chart (the page counts each chart's SVG marks), sorts a table on a click, and leaves a screenshot
of its first screen in $TRACECONV_ARTEFACTS (default build/artefacts/report/).

Without a browser these tests are skipped, with the reason; under CI=true they fail instead
(.ci/run installs Debian's chromium).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser import Browser, PageRun, find_browser
from tests.fixtures import ROOT, fixture

pytestmark = pytest.mark.browser

ARTEFACTS = Path(os.environ.get("TRACECONV_ARTEFACTS", ROOT / "build" / "artefacts")) / "report"
READY = "window.traceconvReport && window.traceconvReport.done ? window.traceconvReport : null"
# Click the kernels table's execution header twice (ascending, then descending) and read the column.
SORT = """(function () {
  var th = Array.prototype.find.call(document.querySelectorAll('th'), function (h) {
    return h.textContent === 'execution (ms)'; });
  if (!th) { return null; }
  var table = th.closest('table'), col = Array.prototype.indexOf.call(th.parentNode.children, th);
  function column() { return Array.prototype.map.call(table.tBodies[0].rows, function (r) {
    return parseFloat(r.cells[col].dataset.v); }); }
  th.click(); var up = column(); th.click(); return {up: up, down: column()};
})()"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    executable = find_browser()
    if executable is None:
        reason = "no headless browser (apt-get install chromium, or set TRACECONV_BROWSER)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason}: CI must run the browser tests (.ci/run installs chromium)")
        pytest.skip(reason)
    with Browser(executable) as b:
        yield b


def _report(out: Path, *inputs: Path) -> Path:
    cmd = [sys.executable, "-m", "traceconv.cli", "report", *map(str, inputs), "-o", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return out


def _check(run: PageRun, name: str, at_least: int) -> None:
    status = run.value
    assert status, f"{name}: the page never said it was drawn ({run.errors})"
    assert status["errors"] == [] and run.errors == [], run.errors
    assert [text for level, text in run.console if level == "warning"] == []
    assert run.foreign_requests == [], f"{name} fetched {run.foreign_requests}"
    assert status["charts"] >= at_least
    assert status["drawn"] == status["charts"], status["marks"]  # every chart has marks
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTEFACTS / f"{name}.png"
    shot.write_bytes(run.screenshot)
    if run.full_page:
        shot.with_suffix(".full.png").write_bytes(run.full_page)
    assert run.screenshot.startswith(b"\x89PNG") and len(run.screenshot) > 10_000


CASES = {
    "pytorch": (("pytorch/h200/train_buggy.pt.trace.json.gz",), 8),  # incl. copies and memory
    "nsys": (("nsys/h200/buggy.sqlite",), 6),
    "nsys-metrics": (("nsys/h200-metrics/sm_after.sqlite",), 7),  # incl. SM activity
    "nsys-memory": (("nsys/h200/memusage.sqlite",), 8),  # CUDA_GPU_MEMORY_USAGE_EVENTS: memory over time
    "ranks": (("pytorch/h200/ddp_rank0.pt.trace.json", "pytorch/h200/ddp_rank1.pt.trace.json"), 6),
}


@pytest.mark.parametrize("name", list(CASES))
def test_report_opens_offline_and_draws_every_chart(browser: Browser, tmp_path: Path, name: str) -> None:
    rels, at_least = CASES[name]
    inputs = [fixture(r) for r in rels]
    out = _report(tmp_path / f"{name}.html", *inputs, *(["--together"] if len(inputs) == 2 else []))
    run = browser.open(out, READY, probe=SORT, full_page=True)
    _check(run, name, at_least)
    assert run.probed is not None, "no kernels table"
    assert run.probed["up"] == sorted(run.probed["up"]) and run.probed["down"] == sorted(run.probed["up"])[::-1]
    assert len(run.probed["up"]) > 1


def test_diff_report_opens_and_draws_every_chart(browser: Browser, tmp_path: Path) -> None:
    out = _report(tmp_path / "diff.html", fixture("nsys/h200/buggy.sqlite"), fixture("nsys/h200/fixed.sqlite"))
    run = browser.open(out, READY, full_page=True)
    _check(run, "diff-buggy-fixed", 13)
