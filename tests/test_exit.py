"""The command line ends its process without the interpreter's teardown, once its exit handlers ran."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import fixture

PROGRAM = """
import atexit, sys, threading, time
from pathlib import Path
from traceconv import process
process.tune()
atexit.register(lambda: Path(sys.argv[1]).write_text("handlers ran"))
if sys.argv[2] == "thread":
    threading.Thread(target=time.sleep, args=(0.2,)).start()
print("out", flush=False)
process.exit_now(int(sys.argv[3]))
print("returned")
sys.exit(7)
"""


def _run(tmp_path: Path, thread: str, code: int) -> subprocess.CompletedProcess[str]:
    marker = tmp_path / "marker"
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(marker), thread, str(code)], capture_output=True, text=True, timeout=60
    )
    assert marker.read_text() == "handlers ran"  # temporary files and workers are cleaned up by these
    return done


@pytest.mark.parametrize("code", [0, 3])
def test_exit_now_runs_the_handlers_and_keeps_the_code(tmp_path: Path, code: int) -> None:
    done = _run(tmp_path, "none", code)
    assert done.returncode == code
    assert done.stdout == "out\n"  # flushed first, and nothing after the call ran


def test_exit_now_leaves_a_running_thread_to_the_usual_exit(tmp_path: Path) -> None:
    done = _run(tmp_path, "thread", 0)
    assert done.stdout == "out\nreturned\n"
    assert done.returncode == 7


def test_the_program_exits_with_its_codes(tmp_path: Path) -> None:
    trace = fixture("pytorch/h200/compiled_triton.json")
    out = tmp_path / "out.parquet"
    ok = subprocess.run([sys.executable, "-m", "traceconv.cli", "ingest", str(trace), "-o", str(out)], timeout=120)
    assert ok.returncode == 0 and out.stat().st_size > 0
    missing = [sys.executable, "-m", "traceconv.cli", "ingest", str(tmp_path / "none.json"), "-o", str(out)]
    bad = subprocess.run(missing, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 3 and "does not exist" in bad.stderr and "Traceback" not in bad.stderr


def test_the_program_keeps_its_codes_with_a_standard_stream_closed(tmp_path: Path) -> None:
    """Started with stdout or stderr closed (``>&-``), Python has no stream object for it."""
    trace = fixture("pytorch/h200/compiled_triton.json")
    program = f"{sys.executable} -m traceconv.cli ingest"
    ok = subprocess.run(["sh", "-c", f'{program} "{trace}" -o "{tmp_path / "a.parquet"}" >&-'], timeout=120)
    assert ok.returncode == 0 and (tmp_path / "a.parquet").stat().st_size > 0
    bad = subprocess.run(["sh", "-c", f'{program} "{tmp_path / "none.json"}" -o "{tmp_path / "b.parquet"}" 2>&-'])
    assert bad.returncode == 3


DESCRIPTORS = """
import os, resource, sys
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
limit = int(sys.argv[1]) if hard == resource.RLIM_INFINITY else min(int(sys.argv[1]), hard)
resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
from traceconv import process
before = sorted(os.listdir("/proc/self/fd"))
process.tune()
size = int(open("/proc/self/status").read().split("FDSize:")[1].split()[0])
print(sorted(os.listdir("/proc/self/fd")) == before, size >= process.DESCRIPTORS)
"""


@pytest.mark.skipif(
    "FDSize:" not in (Path("/proc/self/status").read_text() if Path("/proc/self/status").exists() else ""),
    reason="no descriptor table size in /proc (not Linux)",
)
@pytest.mark.parametrize(("limit", "room"), [(1024, "True"), (32, None)])
def test_the_descriptor_table_grows_before_the_workers_and_leaks_nothing(limit: int, room: str | None) -> None:
    """``process.tune`` grows the file descriptor table while the process has one thread (where the
    kernel grows it later, with pyarrow's threads sharing it, a fork of a worker waits out an RCU grace
    period); it leaves no descriptor open, and a limit below the table it asks for is no error. A child
    inherits its parent's table size, so the size check bites only where that is smaller than
    ``DESCRIPTORS`` (64 on the GPU host; this machine's shells give 256); the other two bite anywhere."""
    done = subprocess.run([sys.executable, "-c", DESCRIPTORS, str(limit)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    leaked_none, grown = done.stdout.split()
    assert leaked_none == "True"
    if room is not None:  # under a low limit the table keeps the size it has
        assert grown == room
