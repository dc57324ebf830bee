"""`ingest` shows bytes-read progress on large inputs when stderr is a terminal, and nothing otherwise."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from traceconv.cli.progress import Bar

from .conftest import fixture


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_bar_draws_on_a_terminal_for_large_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    bar = Bar("big.json")
    bar(50 << 20, 100 << 20)
    bar(100 << 20, 100 << 20)
    bar.close()
    assert "big.json [" in term.getvalue() and "100.0%" in term.getvalue()


def test_bar_is_silent_when_not_a_terminal_or_small(monkeypatch: pytest.MonkeyPatch) -> None:
    pipe = io.StringIO()
    monkeypatch.setattr(sys, "stderr", pipe)
    Bar("big.json")(50 << 20, 100 << 20)
    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    Bar("small.json")(1 << 20, 2 << 20)
    assert pipe.getvalue() == "" and term.getvalue() == ""


def test_ingest_through_a_pipe_prints_no_progress(tmp_path: Path) -> None:
    out = tmp_path / "t.parquet"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "traceconv.cli",
            "ingest",
            str(fixture("pytorch/h200/seed_linear.json")),
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert run.stderr == "" and out.exists()


def test_ingest_on_a_terminal_draws_the_bar(tmp_path: Path) -> None:
    """A real pseudo-terminal, and an input past the 4 MiB threshold (a real trace's events, repeated)."""
    text = (fixture("pytorch/h200/seed_linear.json")).read_text()
    head, _, rest = text.partition('"traceEvents": [')
    events, _, tail = rest.rpartition("]")
    big = tmp_path / "big.json"
    big.write_text(head + '"traceEvents": [' + ",".join([events.strip()] * 25) + "]" + tail)
    assert big.stat().st_size > Bar.MIN_BYTES
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "traceconv.cli", "ingest", str(big), "-o", str(tmp_path / "big.parquet")],
        stdout=subprocess.DEVNULL,
        stderr=follower,
    )
    os.close(follower)
    seen = b""
    while True:
        try:
            data = os.read(leader, 4096)
        except OSError:
            break
        if not data:
            break
        seen += data
    assert proc.wait(timeout=120) == 0
    os.close(leader)
    assert b"big.json [" in seen and b"MiB" in seen
