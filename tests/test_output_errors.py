"""Writing fails cleanly: one line, exit 1, nothing half-written, no temporary files left."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from traceconv import parquet_join
from traceconv import writing as tio
from traceconv.cli import main
from traceconv.readers.pytorch import spill

from .conftest import fixture

TRACE = fixture("pytorch/h200/train_buggy.pt.trace.json.gz")  # 5 MB of JSON: spills to a file
NSYS = fixture("nsys/h200/graph_node.sqlite")


def _disk_full(*args: object, **kwargs: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


class _FullDiskWriter:
    """A Parquet writer whose row groups find the disk full (its other methods are real)."""

    def __init__(self, real: object) -> None:
        self._real = real

    write_table = staticmethod(_disk_full)

    def __getattr__(self, name: str) -> object:
        return getattr(self._real, name)


@pytest.mark.parametrize("where", ["parquet", "spill", "joined"])
def test_disk_full_is_one_clear_line(where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    trace, command = TRACE, "ingest"
    if where == "parquet":
        real = tio._parquet_writer
        monkeypatch.setattr(tio, "_parquet_writer", lambda *a, **k: _FullDiskWriter(real(*a, **k)))
    elif where == "spill":
        monkeypatch.setattr(spill, "SPILL_BYTES", 0)
        monkeypatch.setattr(spill.Spill.__init__, "__defaults__", (0,))
        monkeypatch.setattr(spill.SegmentFile, "write", _disk_full)
    else:  # an export's row groups, encoded apart and joined into the output
        trace, command = NSYS, "nsys"
        monkeypatch.setattr(parquet_join.Joiner, "add", _disk_full)
    out = tmp_path / "out.parquet"
    result = CliRunner().invoke(main, [command, str(trace), "-o", str(out)])
    assert result.exit_code == 1, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "no space left" in lines[0] and "TMPDIR" in lines[0], result.output
    assert "internal error" not in lines[0]
    assert not out.exists() and os.listdir(tmp_path) == ["tmp"]
    assert os.listdir(tmp_path / "tmp") == []


def test_sigterm_exits_143_and_leaves_nothing(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)  # reading it blocks: the process is surely running when the signal comes
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir()
    cmd = [sys.executable, "-m", "traceconv.cli", "ingest", str(fifo), "-o", str(tmp_path / "out.parquet")]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, env=env)
    time.sleep(1.5)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 143, err
    assert b"Traceback" not in err
    assert sorted(os.listdir(tmp_path)) == ["tmp", "trace.json"] and os.listdir(tmp_path / "tmp") == []
