"""Compiled regions and what the GPU ran for them, from the host ranges that PyTorch records.

A compiled program leaves nested host ranges around the work of each call: ``Torch-Compiled
Region: F/N`` (Dynamo's frame F, its N-th compilation), ``CompiledFunction`` and
``CompiledFunctionBackward`` (AOTAutograd's forward and backward), and ``## Call CompiledFxGraph
<hash> ##`` (Inductor's compiled graph). A kernel belongs to every such range its launching call
lies in on the same thread (the launch link ``launch_event_id``: the call's thread and start), so a
range's GPU time counts each kernel once, and nested ranges each count it.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from traceconv.analyses.prepare import OP_KINDS, host_names
from traceconv.analyses.source import Source

FRAME = "Torch-Compiled Region: "
GRAPH = "## Call CompiledFxGraph"
FUNCTIONS = ("CompiledFunction", "CompiledFunctionBackward")

# The host ranges of compiled regions (an NVTX row with a device: Kineto's copy of a range on the GPU's row).
REGIONS_SQL = f"""
SELECT coalesce(trace_id, '') AS trace_id, pid, tid, name, start_ns, end_ns FROM events
WHERE kind IN ('cpu_op', 'nvtx') AND end_ns IS NOT NULL AND (device IS NULL OR kind <> 'nvtx')
  AND (starts_with(name, '{FRAME}') OR name IN {FUNCTIONS} OR starts_with(name, '{GRAPH}'))
"""
BUCKETS = 4  # time buckets per region call, on average: what a kernel's launch is joined on
# Kernels launched inside each region, (region name, kernel) once each: by the launching call's thread
# and start, joined on the time bucket of the start (each call a row per bucket it touches), so that a
# kernel is tested against the calls around its launch, not against every call of its thread.
_HITS_SQL = """
WITH r AS ({regions}),
rb AS (SELECT *, unnest(range(start_ns // {width}, end_ns // {width} + 1)) AS bucket FROM r),
k AS (
  SELECT coalesce(k.trace_id, '') AS trace_id, k.event_id, k.dur_ns, starts_with(k.name, 'triton_') AS triton,
         a.pid, a.tid, a.start_ns AS launch_ns
  FROM events k JOIN events a ON a.event_id = k.launch_event_id AND coalesce(a.trace_id, '') = coalesce(k.trace_id, '')
  WHERE k.kind = 'kernel'
)
SELECT DISTINCT rb.name AS region, k.trace_id, k.event_id, k.dur_ns, k.triton
FROM k JOIN rb ON rb.bucket = k.launch_ns // {width} AND k.trace_id = rb.trace_id AND k.pid = rb.pid
 AND k.tid = rb.tid AND k.launch_ns >= rb.start_ns AND k.launch_ns < rb.end_ns
"""


@dataclass(frozen=True)
class RegionRow:
    """One compiled region, by name: its calls and the GPU work launched inside them."""

    name: str
    kind: str  # "frame" (Torch-Compiled Region), "function" (CompiledFunction[Backward]), "graph" (CompiledFxGraph)
    calls: int
    host_ns: int  # the calls' host time
    gpu_ns: int  # execution time of the kernels launched inside
    kernels: int
    triton_ns: int  # of which Inductor's Triton kernels


def is_region(name: str) -> bool:
    """Whether a host range of this name is a compiled region's (:data:`REGIONS_SQL`'s test)."""
    return name.startswith((FRAME, GRAPH)) or name in FUNCTIONS


def region_kind(name: str) -> str:
    if name.startswith(FRAME):
        return "frame"
    return "graph" if name.startswith(GRAPH) else "function"


def regions(source: Source) -> tuple[list[RegionRow], int]:
    """Every compiled region (most GPU time first) and the GPU time launched inside any of them."""
    if not any(is_region(n) for k, n in host_names(source) if k in OP_KINDS and n is not None):
        return [], 0
    width = source.scalar(f"SELECT (max(end_ns) - min(start_ns)) // ({BUCKETS} * count(*)) FROM ({REGIONS_SQL})")
    if width is None:  # no compiled region
        return [], 0
    source.table("compiled_hits", _HITS_SQL.format(regions=REGIONS_SQL, width=max(int(width), 1)))
    calls = source.frame(
        f"SELECT name, count(*) AS calls, total(end_ns - start_ns) AS host_ns FROM ({REGIONS_SQL}) GROUP BY name"
    )
    gpu = source.frame(
        "SELECT region AS name, count(*) AS kernels, total(dur_ns) AS gpu_ns, "
        "CAST(coalesce(sum(dur_ns) FILTER (WHERE triton), 0) AS BIGINT) AS triton_ns FROM compiled_hits GROUP BY region"
    )
    inside = int(
        source.scalar("SELECT total(dur_ns) FROM (SELECT DISTINCT trace_id, event_id, dur_ns FROM compiled_hits)")
    )
    merged = calls.merge(gpu, on="name", how="left", validate="one_to_one").fillna(0)
    merged = merged.sort_values(["gpu_ns", "name"], ascending=[False, True], kind="stable")
    rows = [
        RegionRow(
            str(r.name),
            region_kind(str(r.name)),
            int(r.calls),
            int(r.host_ns),
            int(r.gpu_ns),
            int(r.kernels),
            int(r.triton_ns),
        )
        for r in merged.itertuples(index=False)
    ]
    return rows, inside


def first_seen(source: Source) -> pd.DataFrame:
    """Each ``Torch-Compiled Region: F/N`` and when its first call began (``name``, ``start_ns``), in time order."""
    return source.frame(
        f"SELECT name, min(start_ns) AS start_ns FROM ({REGIONS_SQL}) WHERE starts_with(name, '{FRAME}') "
        "GROUP BY name ORDER BY start_ns, name"
    )
