"""The scaling curve: `traceconv ingest` at 0, 1, 2, 4, 8 ... workers up to the cores, beside `orjson.loads`.

Run by `bench/run.py` (`make bench`) after its table, or alone:

    .venv/bin/python bench/curve.py --inputs big,x4 --runs 3

Whole processes, as in run.py; the runs are interleaved (run 1 of every worker count and of
orjson.loads, then run 2 ...), so that a machine that speeds up or slows down during the
curve moves every point alike; the median of each is shown.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from run import DATA, PRODUCT, RUNNER, Input, Run, measure, prepare_inputs, warm_cache


def worker_counts(cores: int) -> list[int | None]:
    """0, 1, 2, 4 ... below the cores, the cores but one (one worker per core beside the main
    process), the cores, and None: the default."""
    counts = [0]
    n = 1
    while n < cores - 1:
        counts.append(n)
        n *= 2
    counts += [c for c in (cores - 1, cores) if c > counts[-1]]
    return [*counts, None]


def _command(src: Path, workers: int | None) -> list[str]:
    tc = [str(PRODUCT / "traceconv"), "ingest", str(src), "-o", "{out}/o.parquet"]
    return tc if workers is None else [*tc, "--workers", str(workers)]


def default_workers() -> str:
    """How many workers traceconv picks here by default (it depends on cores and memory)."""
    code = "from traceconv.readers.pytorch.workers import worker_count; print(worker_count(None))"
    done = subprocess.run([str(PRODUCT / "python"), "-c", code], capture_output=True, text=True)
    return done.stdout.strip() or "?"


def _once(cmd: list[str]) -> Run:
    out_dir = Path(tempfile.mkdtemp(prefix="curve-", dir=DATA))
    try:
        return measure([c.replace("{out}", str(out_dir)) for c in cmd], 600, out_dir)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


def curve(src: Input, runs: int, cores: int) -> str:
    """The curve of one input, as a Markdown table."""
    points: dict[str, list[str]] = {"orjson.loads alone": [str(PRODUCT / "python"), str(RUNNER), "orjson_loads",
                                                           str(src.path), "{out}"]}  # fmt: skip
    for workers in worker_counts(cores):
        label = f"default ({default_workers()} workers)" if workers is None else f"--workers {workers}"
        points[label] = _command(src.path, workers)
    done: dict[str, list[Run]] = {label: [] for label in points}
    warm_cache(src.path)
    for i in range(runs):
        for label, cmd in points.items():
            run = _once(cmd)
            print(f"  curve {src.path.name} {label} [{i + 1}/{runs}]: {run.wall:.2f} s, {run.pss_mib:,.0f} MiB PSS"
                  f" {'' if run.ok else run.note}", file=sys.stderr, flush=True)  # fmt: skip
            done[label].append(run)
    med = {label: _median(r) for label, r in done.items()}
    ref, one = med["orjson.loads alone"], med["--workers 0"]
    size = src.path.stat().st_size / 2**20
    out = [f"{src.path.name} ({size:,.0f} MiB), {cores} cores, median of {runs} interleaved runs:", "",
           "| run | wall s | peak PSS MiB (tree) | peak RSS MiB (tree sum) | wall / orjson.loads | vs --workers 0 |",
           "|---|---|---|---|---|---|"]  # fmt: skip
    for label, run in med.items():
        if run is None:
            out.append(f"| {label} | failed: {done[label][-1].note} | | | | |")
            continue
        vs_ref = f"{run.wall / ref.wall:.2f}x" if ref else "–"
        speed = f"{one.wall / run.wall:.2f}x" if one and label != "orjson.loads alone" else "–"
        out.append(f"| {label} | {run.wall:.2f} | {run.pss_mib:,.0f} | {run.rss_mib:,.0f} | {vs_ref} | {speed} |")
    return "\n".join(out) + "\n"


def _median(runs: list[Run]) -> Run | None:
    if not runs or not all(r.ok for r in runs):
        return None
    return Run(
        statistics.median(r.wall for r in runs),
        statistics.median(r.rss_mib for r in runs),
        True,
        "",
        statistics.median(r.pss_mib for r in runs),
    )


def curves(inputs: list[Input], runs: int) -> str:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return "\n".join(curve(src, runs, cores) for src in inputs if not src.missing and src.kind == "json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--inputs", default="big,x4", help="comma-separated JSON inputs of run.py")
    parser.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[2] / "shared")
    args = parser.parse_args()
    text = curves(prepare_inputs(args.shared, set(args.inputs.split(","))), args.runs)
    print(text)
    (DATA.parent / "results").mkdir(exist_ok=True)
    (DATA.parent / "results" / "curve.md").write_text(text)


if __name__ == "__main__":
    main()
