"""Independent reading of steps as the GPU ran them, from the raw files (no traceconv code).

A step's GPU work is what its launching calls (matched by correlation id) started inside the step's
host range, in the step's process; a step completes when both its host range and that work have
ended. Each step lasts from the completion of the one before (the first: from its host range's
start, or, when the GPU was still running earlier work then, from the end of that work or the start
of its own, whichever came first) to its own completion, and the step time is the median of these
(the pace of the steps); the GPUs' busy share is the union of their work over the same span.
"""

from __future__ import annotations

import sqlite3
import statistics
from pathlib import Path
from typing import Any

from .kineto_truth import load, to_ns
from .summary_truth import GPU_CATS, LAUNCH_CATS

STEP_NAMES = ("ProfilerStep#",)


ONE_OFF_CALLS = ("StreamBeginCapture", "GraphInstantiate")  # a CUDA graph captured
COMPILES = ("entire_frame_compile", "_compile.compile_inner (dynamo_timed)")  # Dynamo compiling


def _one_off(name: str) -> bool:
    return any(c in name for c in ONE_OFF_CALLS) or name in COMPILES or name.startswith("compile_attempt_")


def _pace(steps: list[tuple[int, int]], gpu: list[tuple[int, int, int]], marks: list[int]) -> dict[str, Any]:
    """``steps``: host ranges (start, end) in time order; ``gpu``: (launch start, start, end) of the GPU work;
    ``marks``: when the program captured a CUDA graph or compiled."""
    gpu = sorted(gpu)
    ends = []
    for s, e in steps:
        mine = [g_end for launch, _, g_end in gpu if s <= launch < e]
        ends.append(max([e, *mine]))
    ends = [max(ends[: k + 1]) for k in range(len(ends))]
    first_start, first_end = steps[0]
    before = [g_end for launch, _, g_end in gpu if launch < first_start]
    own = [g_start for launch, g_start, _ in gpu if first_start <= launch < first_end]
    begin = first_start
    if before and own:
        begin = max(first_start, min(max(before), min(own)))
    starts = [begin, *ends[:-1]]
    gaps = [b - a for a, b in zip(starts, ends, strict=True)]
    median = statistics.median(gaps)
    keep = [True] * len(gaps)
    if len(gaps) > 2 and gaps[0] > 3 * median:  # warm-up, as docs/summary.md defines it
        keep[0] = False
    long = [
        k
        for k in range(len(gaps))
        if keep[k] and gaps[k] > 3 * median and any(steps[k][0] <= t < steps[k][1] for t in marks)
    ]
    if len(gaps) > 2 and 0 < len(long) <= max(1, int(len(gaps) * 0.1)):  # one-offs, as docs/summary.md says
        for k in long:
            keep[k] = False
    windows = [(a, b) for a, b, k in zip(starts, ends, keep, strict=True) if k]
    gaps = [b - a for a, b in windows]
    busy = 0
    for lo, hi in windows:
        spans = sorted((max(a, lo), min(b, hi)) for _, a, b in gpu if b > lo and a < hi)
        reach = lo
        for a, b in spans:
            if b > reach:
                busy += b - max(a, reach)
                reach = b
    ahead = statistics.median(
        max([g_end for launch, _, g_end in gpu if s <= launch < e], default=e) - e for s, e in steps
    )
    return {
        "step_ns": statistics.median(gaps) if gaps else None,
        "busy_pct": busy * 100.0 / sum(gaps) if sum(gaps) else None,
        "host_ahead_ns": ahead,
        "steps": len(steps),
    }


def json_steps(path: Path) -> dict[str, Any]:
    """From a PyTorch profiler trace: ``ProfilerStep#N`` ranges, launches by their ``correlation``."""
    events = [e for e in load(path)["traceEvents"] if e.get("ph") == "X"]
    steps = sorted(
        (to_ns(e["ts"]), to_ns(e["ts"]) + to_ns(e["dur"]))
        for e in events
        if str(e.get("name", "")).startswith(STEP_NAMES) and e.get("cat") in ("cpu_op", "user_annotation")
    )
    launch = {e["args"]["correlation"]: to_ns(e["ts"]) for e in events if e.get("cat") in LAUNCH_CATS and "args" in e}
    gpu = [
        (launch.get(e["args"].get("correlation"), to_ns(e["ts"])), to_ns(e["ts"]), to_ns(e["ts"]) + to_ns(e["dur"]))
        for e in events
        if e.get("cat") in GPU_CATS
    ]
    marks = [to_ns(e["ts"]) for e in events if _one_off(str(e.get("name", "")))]
    return _pace(steps, gpu, marks)


GPU_TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
)


def sqlite_steps(path: Path, pattern: str = "step_[0-9]*") -> dict[str, Any]:
    """From an Nsight Systems export: NVTX ranges named ``step_N``, launches by ``correlationId``."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    have = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    steps = sorted(
        db.execute(
            "SELECT start, end FROM NVTX_EVENTS WHERE coalesce(text, (SELECT value FROM StringIds WHERE id = textId)) "
            "GLOB ? AND end IS NOT NULL",
            [pattern],
        ).fetchall()
    )
    launch = dict(db.execute("SELECT correlationId, start FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchall())
    gpu = []
    for table in GPU_TABLES:
        if table in have:
            for corr, s, e in db.execute(f"SELECT correlationId, start, end FROM {table}"):
                gpu.append((launch.get(corr, s), s, e))
    names = dict(db.execute("SELECT id, value FROM StringIds").fetchall())
    marks = [
        t for t, n in db.execute("SELECT start, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME") if _one_off(names.get(n, ""))
    ]
    marks += [
        t
        for t, n in db.execute(
            "SELECT start, coalesce(text, (SELECT value FROM StringIds WHERE id = textId)) FROM NVTX_EVENTS"
        )
        if n and _one_off(n)
    ]
    db.close()
    return _pace(steps, gpu, marks)
