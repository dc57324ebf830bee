"""40 small real traces (tests/fleet_data.py) converted to a partitioned dataset four ways, side
by side: one process, the local process pool, ``--scheduler local:2``, and an existing cluster
of a ``dask scheduler`` and two ``dask worker`` processes (started beforehand, not timed).

    .venv/bin/python bench/fleet.py            # prints a Markdown table
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fleet_data import traces  # noqa: E402
from tests.test_fleet import cluster  # noqa: E402


def timed(args: list[str]) -> float:
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "traceconv.cli", "ingest", *args], check=True, capture_output=True)
    return time.monotonic() - started


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="traceconv-fleet-bench-"))
    try:
        runs = traces(work / "runs")
        rows = [
            ("one process (--partitioned --workers 0)", ["--partitioned", "--workers", "0"]),
            ("local process pool (--partitioned)", ["--partitioned"]),
            ("--scheduler local:2 (cluster start included)", ["--scheduler", "local:2"]),
        ]
        results = [
            (name, timed([str(runs), "-o", str(work / f"out{i}.parquet"), *args]))
            for i, (name, args) in enumerate(rows)
        ]
        with cluster(work / "cluster") as fleet:
            seconds = timed([str(runs), "-o", str(work / "outc.parquet"), "--scheduler", fleet.address])
            results.append(("--scheduler tcp:// (2 dask worker processes, already running)", seconds))
        print("| 40 traces, 3 partitions | wall s |\n|---|---|")
        for name, seconds in results:
            print(f"| {name} | {seconds:.1f} |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
