"""Independent reading of raw traces for the summary tests: the JSON or SQLite export itself, no traceconv code.

GPU time is attributed by the launch call's correlation id. A host sync is *staging* when it
is a stream synchronize and the previous runtime call on its thread launched a host-to-device
copy from pageable memory (joined by correlation id); every other sync is a *result wait*.
"""

from __future__ import annotations

import bisect
import sqlite3
from collections import defaultdict
from pathlib import Path
from typing import Any

from .kineto_truth import load as load_json
from .kineto_truth import to_ns

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
LAUNCH_CATS = {"cuda_runtime", "cuda_driver"}
KINDS = ("result_waits", "staging")
PAGEABLE_HTOD = "Memcpy HtoD (Pageable -> Device)"


def json_sync_kinds(path: Path) -> dict[str, list[int]]:
    """Durations of the syncs in the steps, by kind: staging when the previous runtime call on the
    thread launched a pageable HtoD copy (by its correlation id), else a result wait."""
    events = [e for e in load_json(path)["traceEvents"] if e.get("ph") == "X"]
    steps = json_steps(events)
    copy = {e["args"]["correlation"]: e["name"] for e in events if e.get("cat") == "gpu_memcpy"}
    calls = sorted((e for e in events if e.get("cat") in LAUNCH_CATS), key=lambda e: (e["tid"], e["ts"]))
    kinds: dict[str, list[int]] = {k: [] for k in KINDS}
    for prev, e in zip([{}, *calls], calls, strict=False):
        if e["name"].endswith("Synchronize") and any(s <= to_ns(e["ts"]) <= x for s, x in steps):
            staged = prev.get("tid") == e["tid"] and copy.get(prev["args"].get("correlation")) == PAGEABLE_HTOD
            kind = "staging" if staged and e["name"] == "cudaStreamSynchronize" else "result_waits"
            kinds[kind].append(to_ns(e["dur"]))
    return kinds


def sqlite_sync_kinds(path: Path) -> dict[str, list[int]]:
    """The same from the export's tables: LAG over each thread's runtime calls, MEMCPY copyKind 1 (HtoD), srcKind 0
    (pageable); steps are the NVTX ranges step_N (warm-up left out)."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    steps = kept_steps(db.execute("SELECT start, end FROM NVTX_EVENTS WHERE text GLOB 'step_[0-9]*'").fetchall())
    rows = db.execute(
        "WITH c AS (SELECT r.start, r.end, s.value AS name, LAG(r.correlationId) OVER"
        " (PARTITION BY r.globalTid ORDER BY r.start) AS prev FROM CUPTI_ACTIVITY_KIND_RUNTIME r"
        " JOIN StringIds s ON s.id = r.nameId)"
        " SELECT c.start, c.end - c.start, c.name LIKE 'cudaStreamSynchronize%' AND m.copyKind = 1 AND m.srcKind = 0"
        " FROM c LEFT JOIN CUPTI_ACTIVITY_KIND_MEMCPY m ON m.correlationId = c.prev WHERE c.name LIKE '%Synchronize%'"
    ).fetchall()
    db.close()
    rows = [(dur, staged) for start, dur, staged in rows if any(s <= start <= e for s, e in steps)]
    return {k: [dur for dur, staged in rows if bool(staged) == (k == "staging")] for k in KINDS}


def kept_steps(steps: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Steps in time order without the warm-up: a first step over 3x the median of all (docs/summary.md)."""
    steps = sorted(steps)
    durations = sorted(e - s for s, e in steps)
    n = len(durations)
    median = (durations[n // 2] + durations[(n - 1) // 2]) / 2 if n else 0
    if n > 2 and steps[0][1] - steps[0][0] > 3 * median:
        return steps[1:]
    return steps


def json_steps(events: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return kept_steps(
        [
            (to_ns(e["ts"]), to_ns(e["ts"]) + to_ns(e["dur"]))
            for e in events
            if e.get("cat") == "user_annotation" and str(e["name"]).startswith("ProfilerStep#")
        ]
    )


def json_gpu_time_in_steps(path: Path) -> int:
    """Summed durations of the GPU rows whose launch call (else the row itself) starts in a step."""
    events = [e for e in load_json(path)["traceEvents"] if e.get("ph") == "X"]
    steps = json_steps(events)
    launch = {
        e["args"]["correlation"]: to_ns(e["ts"])
        for e in events
        if e.get("cat") in LAUNCH_CATS and "correlation" in e.get("args", {})
    }
    total = 0
    for e in events:
        if e.get("cat") in GPU_CATS:
            t = launch.get(e["args"].get("correlation"), to_ns(e["ts"]))
            total += to_ns(e["dur"]) if any(s <= t <= x for s, x in steps) else 0
    return total


def json_op_gpu_times(path: Path) -> tuple[dict[str, int], dict[str, int]]:
    """Self and total GPU time per cpu_op name, straight from the JSON: launch -> innermost enclosing op."""
    events = [e for e in load_json(path)["traceEvents"] if e.get("ph") == "X"]
    ops_by_tid: dict[Any, list[tuple[int, int, str]]] = defaultdict(list)
    for e in events:
        if e.get("cat") == "cpu_op":
            start = to_ns(e["ts"])
            ops_by_tid[e["tid"]].append((start, start + to_ns(e["dur"]), e["name"]))
    for ops in ops_by_tid.values():
        ops.sort(key=lambda o: (o[0], -o[1]))
    launches = {
        e["args"]["correlation"]: (e["tid"], to_ns(e["ts"]))
        for e in events
        if e.get("cat") in LAUNCH_CATS and "correlation" in e.get("args", {})
    }
    self_ns: dict[str, int] = defaultdict(int)
    total_ns: dict[str, int] = defaultdict(int)
    for e in events:
        if e.get("cat") not in GPU_CATS or e["args"].get("correlation") not in launches:
            continue
        tid, t = launches[e["args"]["correlation"]]
        ops = ops_by_tid.get(tid, [])
        upto = bisect.bisect_right(ops, (t, float("inf"), ""))
        enclosing = [o for o in ops[:upto] if o[0] <= t <= o[1]]
        if not enclosing:
            continue
        self_ns[enclosing[-1][2]] += to_ns(e["dur"])
        for name in {o[2] for o in enclosing}:
            total_ns[name] += to_ns(e["dur"]) * sum(1 for o in enclosing if o[2] == name)
    return self_ns, total_ns
