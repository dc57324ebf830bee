"""What a profile can answer: what it lacks, what that hides, and the profiler option that adds it.

A summary starts with these, so that a figure that cannot be known is not mistaken for a zero
and a finding that would need the missing data abstains rather than guesses: no GPU activity
(every GPU figure), no allocator events (the memory questions), no steps (everything is measured
over the whole window), no GPU metrics (SM activity), no input shapes (FLOPs and the operators'
shapes), a capture that ends inside a step, and what the profiler itself said it dropped.
"""

from __future__ import annotations

import re

from traceconv.analyses.prepare import GPU_WORK, HOST_RANGES, Facts, step_hint
from traceconv.analyses.results import Lack
from traceconv.analyses.source import Source

SAMPLED_OPS = 10_000  # CPU operators whose arguments are looked at for shapes
_DROPPED = re.compile(r"drop|lost|overflow|discard|buffer.*full", re.IGNORECASE)


def lacks(source: Source, facts: Facts) -> list[Lack]:
    """What the input does not hold, for a PyTorch trace or an Nsight Systems export (or both)."""
    c = _counts(source)
    nsys, torch = "nsys" in facts.source, "pytorch" in facts.source
    out: list[Lack] = []
    if not c["gpu"]:
        out.append(
            Lack(
                "GPU activity",
                "no GPU figures",
                _either(torch, nsys, "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]", "-t cuda"),
            )
        )
    if not c["memory"]:
        out.append(
            Lack(
                "allocator events",
                "memory unanswered",
                _either(torch, nsys, "profile_memory=True", "--cuda-memory-usage=true"),
            )
        )
    if facts.steps is None:
        out.append(Lack("steps", "no per-step figures: measured over the whole window", step_hint(source)))
    if not c["metric"]:
        out.append(
            Lack(
                "GPU metrics",
                "SM activity unknown",
                "nsys profile --gpu-metrics-devices=all",
            )
        )
    if torch and c["ops"] and not c["shaped"]:
        out.append(Lack("input shapes", "no shapes or FLOPs", "record_shapes=True"))
    if nsys and not torch and facts.program.framework == "pytorch" and not c["nvtx_shapes"]:
        out.append(Lack("input shapes", "no operators' shapes or FLOPs", "--pytorch=autograd-shapes-nvtx"))
    if c["open_steps"]:
        out.append(
            Lack(
                "the end of a step",
                f"{c['open_steps']} step range(s) never ended in the capture: the last step is cut",
                "end the capture after a whole step (torch.profiler schedule; nsys --capture-range-end)",
            )
        )
    for message in _dropped(source):
        out.append(Lack("events the profiler dropped", message, "a shorter capture or larger profiler buffers"))
    return out


def _either(torch: bool, nsys: bool, torch_option: str, nsys_option: str) -> str:
    if torch and not nsys:
        return f"torch.profiler: {torch_option}"
    if nsys and not torch:
        return f"nsys profile {nsys_option}"
    return f"torch.profiler: {torch_option}; nsys profile {nsys_option}"


def _counts(source: Source) -> dict[str, int]:
    shaped = "args LIKE '%Input Dims%'" if source.has("args") else "false"
    # the rows counted per kind first, and the NVTX ranges' names apart: filtered aggregates over every row
    # of the input took several times as long
    row = source.arrow(
        f"SELECT CAST(sum(n) FILTER (WHERE {GPU_WORK}) AS BIGINT) AS gpu, "
        "CAST(sum(n) FILTER (WHERE kind = 'memory') AS BIGINT) AS memory, "
        "CAST(sum(n) FILTER (WHERE kind = 'metric') AS BIGINT) AS metric, "
        "CAST(sum(n) FILTER (WHERE kind = 'cpu_op') AS BIGINT) AS ops, "
        "(SELECT count(*) FROM events WHERE kind = 'nvtx' AND name LIKE '%sizes = %') AS nvtx_shapes "
        "FROM (SELECT kind, count(*) AS n FROM events GROUP BY kind)"
    ).to_pylist()[0]
    row["shaped"] = source.scalar(
        f"SELECT count(*) FILTER (WHERE {shaped}) FROM (SELECT args FROM events WHERE kind = 'cpu_op' "
        f"LIMIT {SAMPLED_OPS})"
    )
    row["open_steps"] = source.scalar(
        f"SELECT count(*) FROM ({HOST_RANGES}) r JOIN labels l ON l.name = r.name "
        "WHERE l.is_step AND r.kind IN ('cpu_op', 'nvtx') AND r.end_ns IS NULL"
    )
    return {k: int(v or 0) for k, v in row.items()}


def _dropped(source: Source) -> list[str]:
    """What Nsight Systems' diagnostics said about events it lost."""
    if not source.has("category"):
        return []
    names = source.arrow("SELECT DISTINCT name FROM events WHERE category = 'DIAGNOSTIC_EVENT' AND name IS NOT NULL")[
        "name"
    ].to_pylist()
    return [str(n).strip() for n in names if _DROPPED.search(str(n))][:3]
