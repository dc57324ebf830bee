"""What a profile can answer: what it lacks, what that hides, and the profiler option that adds it.

A summary starts with these, so that a figure that cannot be known is not mistaken for a zero
and a finding that would need the missing data abstains rather than guesses: no GPU activity
(every GPU figure), no allocator events (the memory questions), no steps (everything is measured
over the whole window), no GPU metrics (SM activity), no input shapes (FLOPs and the operators'
shapes), a capture that ends inside a step, and what the profiler itself said it dropped.
"""

from __future__ import annotations

import re

from traceconv.analyses.prepare import HOST_RANGES, Facts, step_hint
from traceconv.analyses.results import Lack
from traceconv.analyses.source import Source
from traceconv.analyses.vocabulary import GPU_WORK_KINDS, kind_counts

SAMPLED_OPS = 10_000  # CPU operators whose arguments are looked at for shapes
_DROPPED = re.compile(r"drop|lost|overflow|discard|buffer.*full", re.IGNORECASE)


def lacks(source: Source, facts: Facts) -> list[Lack]:
    """What the input does not hold, for a PyTorch trace or an Nsight Systems export (or both)."""
    counts = kind_counts(source)
    nsys, torch = "nsys" in facts.source, "pytorch" in facts.source
    out: list[Lack] = []
    if not sum(counts.get(k, 0) for k in GPU_WORK_KINDS):
        out.append(
            Lack(
                "GPU activity",
                "no GPU figures",
                _either(torch, nsys, "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]", "-t cuda"),
            )
        )
    if not counts.get("memory"):
        out.append(
            Lack(
                "allocator events",
                "memory unanswered",
                _either(torch, nsys, "profile_memory=True", "--cuda-memory-usage=true"),
            )
        )
    if facts.steps is None:
        out.append(Lack("steps", "no per-step figures: measured over the whole window", step_hint(source)))
    if not counts.get("metric"):
        out.append(
            Lack(
                "GPU metrics",
                "SM activity unknown",
                "nsys profile --gpu-metrics-devices=all",
            )
        )
    if torch and counts.get("cpu_op") and not _shaped(source):
        out.append(Lack("input shapes", "no shapes or FLOPs", "record_shapes=True"))
    if nsys and not torch and facts.program.framework == "pytorch" and not _nvtx_shapes(source):
        out.append(Lack("input shapes", "no operators' shapes or FLOPs", "--pytorch=autograd-shapes-nvtx"))
    open_steps = _open_steps(source)
    if open_steps:
        out.append(
            Lack(
                "the end of a step",
                f"{open_steps} step range(s) never ended in the capture: the last step is cut",
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


def _shaped(source: Source) -> int:
    """How many of the first :data:`SAMPLED_OPS` CPU operators have input shapes."""
    shaped = "args LIKE '%Input Dims%'" if source.has("args") else "false"
    got = source.scalar(
        f"SELECT count(*) FILTER (WHERE {shaped}) FROM (SELECT args FROM events WHERE kind = 'cpu_op' "
        f"LIMIT {SAMPLED_OPS})"
    )
    return int(got or 0)


def _nvtx_shapes(source: Source) -> int:
    """How many NVTX ranges carry shapes (``--pytorch=autograd-shapes-nvtx``)."""
    return int(source.scalar("SELECT count(*) FROM events WHERE kind = 'nvtx' AND name LIKE '%sizes = %'") or 0)


def _open_steps(source: Source) -> int:
    """How many step ranges never ended."""
    got = source.scalar(
        f"SELECT count(*) FROM ({HOST_RANGES}) r JOIN labels l ON l.name = r.name "
        "WHERE l.is_step AND r.kind IN ('cpu_op', 'nvtx') AND r.end_ns IS NULL"
    )
    return int(got or 0)


def _dropped(source: Source) -> list[str]:
    """What Nsight Systems' diagnostics said about events it lost."""
    if not source.has("category") or not kind_counts(source).get("other"):  # the reader writes them as ``other``
        return []
    names = source.arrow(
        "SELECT DISTINCT name FROM events WHERE kind = 'other' AND category = 'DIAGNOSTIC_EVENT' AND name IS NOT NULL"
    )["name"].to_pylist()
    return [str(n).strip() for n in names if _DROPPED.search(str(n))][:3]
