"""Where the memory went (issue 19 part 3): each device's peak, the allocations live at it and
who made them, the step ends, and the findings MEMORY_GROWTH and FRAGMENTATION.

Every figure is checked against the raw input read directly: the PyTorch ``[memory]`` events
of the JSON (exact nanoseconds through ``Decimal``), replayed alloc/free by address, and the
``CUDA_GPU_MEMORY_USAGE_EVENTS`` of the Nsight Systems export through sqlite3. No real trace here
leaks; the growth rule is checked on a real trace whose memory rows are shifted by hand, step by
step (named as such below).
"""

from __future__ import annotations

import gzip
import json
import sqlite3
from collections import defaultdict
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from click.testing import CliRunner

from traceconv.analyses import memory as M
from traceconv.analyses.common import load
from traceconv.analyses.prepare import NO_OP, prepare
from traceconv.analyses.results import MemoryPeak
from traceconv.analyses.source import Source
from traceconv.analyses.summary import as_dict, summarize
from traceconv.analyses.summary.memory_findings import memory_findings
from traceconv.analyses.thresholds import DEFAULTS
from traceconv.cli import main

from .fixtures import fixture

TRAIN_MEM = fixture("key_averages/h200/ka_train_mem.json")
PYTORCH = [
    TRAIN_MEM,
    fixture("key_averages/h200/ka_copies.json"),
    fixture("key_averages/h200/ka_autocast.json"),
    fixture("pytorch/h200/train_buggy.pt.trace.json.gz"),
    fixture("pytorch/h200/seed_linear.json"),
]
MEMUSAGE = fixture("nsys/h200/memusage.sqlite")
THRESHOLD_MB = ("--threshold", "min_fragmentation_mb=50")


def _memory(path: Path, top: int = 0) -> dict[str, MemoryPeak]:
    with Source(load(path)) as source:
        facts = prepare(source)
        return M.memory(source, facts.steps, top, facts.window[0])


def _raw_events(path: Path) -> list[dict[str, Any]]:
    opener: Any = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        events: list[dict[str, Any]] = json.load(f, parse_float=Decimal)["traceEvents"]
    return events


def _ns(us: Any) -> int:
    return int(Decimal(us) * 1000)


def _raw_replay(path: Path) -> dict[str, dict[str, Any]]:
    """Per device, from the raw JSON alone: the peak (first highest Total Allocated in time order),
    reserved then, and the allocations live just after it, each named by the innermost CPU
    operator or annotation of its thread that encloses it (allocation primitives aside)."""
    events = _raw_events(path)
    mem = sorted(
        (e for e in events if e.get("name") == "[memory]"), key=lambda e: _ns(e["ts"])
    )  # stable: file order breaks ties, as event_id does
    ranges = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation") and e["name"] not in M.PRIMITIVES:
            ranges[(e["pid"], e["tid"])].append((_ns(e["ts"]), _ns(e["ts"]) + _ns(e.get("dur", 0)), e["name"]))
    out = {}
    for dev in {_dev(e) for e in mem}:
        rows = [e for e in mem if _dev(e) == dev]
        top = max(e["args"]["Total Allocated"] for e in rows)
        at = next(i for i, e in enumerate(rows) if e["args"]["Total Allocated"] == top)
        live: dict[int, dict[str, Any]] = {}
        for e in rows[: at + 1]:
            live.pop(e["args"]["Addr"], None)  # a free, or an allocation at an address whose free went unrecorded
            if e["args"]["Bytes"] > 0:
                live[e["args"]["Addr"]] = e
        held: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for e in live.values():
            t = _ns(e["ts"])
            around = [(s, -(end - s), n) for s, end, n in ranges[(e["pid"], e["tid"])] if s <= t <= end]
            name = max(around)[2] if around else NO_OP
            held[name][0] += e["args"]["Bytes"]
            held[name][1] += 1
        peak = rows[at]
        out[dev] = {
            "allocated": top,
            "reserved": max(e["args"]["Total Reserved"] for e in rows),
            "reserved_then": peak["args"]["Total Reserved"],
            "offset_ns": _ns(peak["ts"]) - _ns(rows[0]["ts"]),
            "holders": {n: tuple(v) for n, v in held.items()},
        }
    return out


def _dev(e: dict[str, Any]) -> str:
    return str(e["args"]["Device Id"]) if e["args"]["Device Id"] >= 0 else "cpu"


@pytest.mark.parametrize("path", PYTORCH, ids=lambda p: p.name)
def test_pytorch_peak_and_holders_equal_an_independent_replay_of_the_raw_json(path: Path) -> None:
    ours = _memory(path)
    raw = _raw_replay(path)
    assert set(ours) == set(raw)
    for dev, want in raw.items():
        m = ours[dev]
        assert (m.allocated_peak_bytes, m.reserved_peak_bytes) == (want["allocated"], want["reserved"])
        assert m.reserved_at_peak_bytes == want["reserved_then"]
        first = min(p.start_ns for p in m.series)
        assert m.peak_ns is not None and m.peak_ns - first == want["offset_ns"]
        assert {h.name: (h.bytes, h.count) for h in m.holders} == want["holders"]
        assert m.live_bytes == sum(b for b, _ in want["holders"].values())
        # what the trace cannot name: allocated before it began
        assert m.before_trace_bytes == m.allocated_peak_bytes - m.live_bytes >= 0


def test_the_series_is_bounded_and_keeps_the_peak() -> None:
    for m in _memory(fixture("pytorch/h200/train_buggy.pt.trace.json.gz")).values():
        assert 0 < len(m.series) <= M.POINTS
        assert max(p.allocated_bytes for p in m.series) == m.allocated_peak_bytes
        assert [p.start_ns for p in m.series] == sorted(p.start_ns for p in m.series)


def test_nsys_peak_and_holders_equal_the_raw_memory_usage_events() -> None:
    """memusage.sqlite: 1,662 allocations, no frees; running sum per device in (start, row) order."""
    con = sqlite3.connect(MEMUSAGE)
    rows = con.execute(
        "SELECT m.bytes, m.memoryOperationType, m.memKind, m.correlationId, s.value "
        "FROM CUDA_GPU_MEMORY_USAGE_EVENTS m "
        "LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = m.correlationId "
        "LEFT JOIN StringIds s ON s.id = r.nameId WHERE m.deviceId = 0 ORDER BY m.start, m.rowid"
    ).fetchall()
    total, top = 0, 0
    for b, op, *_ in rows:
        total += b if op == 0 else -b
        top = max(top, total)
    m = _memory(MEMUSAGE)["0"]
    assert m.allocated_peak_bytes == top and m.reserved_at_peak_bytes is None
    assert m.reserved_peak_bytes is None  # the driver's usage has no reserved figure: unknown, not 0 bytes
    assert m.before_trace_bytes == 0 and sum(h.bytes for h in m.holders) == m.live_bytes == top  # nothing freed
    held = {h.name: h for h in m.holders}
    static = [b for b, _, kind, corr, _ in rows if kind == 5 and not corr]  # module globals: no CUDA call made them
    assert (held[f"{NO_OP} [DeviceStatic]"].bytes, held[f"{NO_OP} [DeviceStatic]"].count) == (sum(static), len(static))
    pinned = [b for b, _, kind, _, name in rows if kind == 1 and name.startswith("cudaHostAlloc")]
    assert sum(h.bytes for n, h in held.items() if n.endswith("[Pinned]")) == sum(pinned)
    # allocations made inside an NVTX range are named by it, the others by their call
    assert held["forward"].count == 28 and "cudaMalloc" in held


@pytest.mark.parametrize("path", [TRAIN_MEM, fixture("pytorch/h200/train_buggy.pt.trace.json.gz"), MEMUSAGE])
def test_no_real_trace_here_leaks(path: Path) -> None:
    d = as_dict(summarize(load(path)))
    assert "MEMORY_GROWTH" not in {f["code"] for f in d["findings"]}
    ends = [m["step_end_bytes"] for m in d["memory"].values() if m["step_end_bytes"]]
    assert ends and all(M.growth(e) is None for e in ends)


def _leaking(table: pa.Table, per_step: int) -> pa.Table:
    """HAND-MADE: the real trace with ``per_step`` bytes added to the GPU's running total after the
    end of every step, as if each step kept that much (a documented shift, not a real leak)."""
    steps = prepare(table).steps
    assert steps is not None and steps.count >= 3
    start = table["start_ns"].to_numpy(zero_copy_only=False)
    kept = sum((start > end).astype("int64") for end in steps.end_ns) * per_step
    gpu = pc.and_(pc.equal(table["kind"].cast(pa.string()), "memory"), pc.is_valid(table["device"]))
    shifted = pc.if_else(gpu, pc.add(table["total_allocated_bytes"], pa.array(kept)), table["total_allocated_bytes"])
    return table.set_column(table.schema.get_field_index("total_allocated_bytes"), "total_allocated_bytes", shifted)


def test_memory_growth_on_a_hand_shifted_real_trace() -> None:
    table = _leaking(load(fixture("pytorch/h200/train_buggy.pt.trace.json.gz")), 8_000_000)
    s = summarize(table)
    ends = s.memory["0"].step_end_bytes
    assert [b - ends[0] for b in ends] == [i * 8_000_000 for i in range(len(ends))]
    found = [f for f in s.findings if f.code == "MEMORY_GROWTH"]
    assert len(found) == 1 and found[0].value == 8.0 and found[0].severity == "high"  # 8x the 1 MB a step
    assert "loss.item()" in found[0].message and "empty_cache() is not the fix" in found[0].message


def test_growth_needs_memory_that_never_falls_and_grows_at_half_the_steps() -> None:
    real = _memory(MEMUSAGE)["0"].step_end_bytes  # 7 real step ends, all equal
    assert M.growth(real) is None
    rising = [b + i * 2_000_000 for i, b in enumerate(real)]  # HAND-MADE shift: +2 MB a step
    assert M.growth(rising) == 2_000_000
    rising[3] = rising[2]  # one step that did not grow: the caching allocator grows in blocks
    assert M.growth(rising) == 2_000_000
    stairs = [b + (i // 2) * 4_000_000 for i, b in enumerate(real)]  # +4 MB every other step: 3 of 6 grow
    assert M.growth(stairs) == pytest.approx(2_000_000)
    rising[5] = rising[4] - 1  # a step whose end is below the one before: not a leak
    assert M.growth(rising) is None
    once = [b + (4_000_000 if i == 6 else 0) for i, b in enumerate(real)]  # grows once in 6
    assert M.growth(once) is None


def test_fragmentation_is_reserved_minus_allocated_at_the_peak_and_its_threshold_overridable() -> None:
    m = _memory(TRAIN_MEM)["0"]
    assert m.reserved_at_peak_bytes is not None
    pct = (m.reserved_at_peak_bytes - m.allocated_peak_bytes) * 100 / m.reserved_at_peak_bytes
    assert memory_findings({"0": m}, DEFAULTS) == []  # 21% of 285 MB: below both defaults
    result = CliRunner().invoke(
        main,
        ["summary", str(TRAIN_MEM), "--format", "json", *("--threshold", "FRAGMENTATION=20"), *THRESHOLD_MB],
    )
    assert result.exit_code == 0, result.output
    (f,) = [f for f in json.loads(result.output)["findings"] if f["code"] == "FRAGMENTATION"]
    assert f["value"] == round(pct, 2) and f["threshold"] == 20
    assert "expandable_segments:True" in f["message"]


def test_summary_json_and_text_show_the_memory() -> None:
    runner = CliRunner()
    d = json.loads(runner.invoke(main, ["summary", str(TRAIN_MEM), "--format", "json"]).output)
    gpu = d["memory"]["0"]
    assert {"allocated_peak_bytes", "reserved_peak_bytes", "peak_ns", "holders", "step_end_bytes"} <= set(gpu)
    assert gpu["holders"][0] == {"name": "aten::sum", "bytes": 33_571_328, "count": 3}
    text = runner.invoke(main, ["summary", str(TRAIN_MEM)], env={"COLUMNS": "100"}).output
    assert "Memory peaks: GPU 0: 225.1 MB allocated at 5.65 ms, 285.2 MB reserved" in text
    assert "GPU 0 at the peak: aten::sum 33.6 MB x3; aten::addmm 16.8 MB x1" in text
