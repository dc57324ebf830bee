"""The memory findings, per device, from :mod:`traceconv.analyses.memory`: ``MEMORY_GROWTH`` (a leak:
the allocated memory at each step's end never falls and grows) and ``FRAGMENTATION`` (at the
allocated peak, much of what the caching allocator reserved is not allocated). They say what is
held, not what a fix would win a step, and come after the time findings."""

from __future__ import annotations

from traceconv.analyses.finding import Finding, make, ratio
from traceconv.analyses.memory import growth
from traceconv.analyses.prepare import Program
from traceconv.analyses.results import MemoryPeak
from traceconv.analyses.summary.advice import fix
from traceconv.analyses.summary.findings import PYTORCH
from traceconv.analyses.thresholds import DEFAULTS, Thresholds
from traceconv.units import mb


def memory_findings(
    memory: dict[str, MemoryPeak], t: Thresholds = DEFAULTS, program: Program = PYTORCH
) -> list[Finding]:
    """``MEMORY_GROWTH`` and ``FRAGMENTATION``: at most one of each, for the device furthest past."""
    out = []
    for check in (memory_growth, fragmentation):
        found = [f for dev, peak in memory.items() if dev != "cpu" and (f := check(dev, peak, t, program))]
        if found:
            out.append(max(found, key=ratio))
    return out


def memory_growth(dev: str, m: MemoryPeak, t: Thresholds, program: Program) -> Finding | None:
    per_step = growth(m.step_end_bytes)
    if per_step is None or per_step / 1e6 < t.MEMORY_GROWTH:
        return None
    ends = m.step_end_bytes
    msg = (
        f"GPU {dev}: allocated memory at the end of each step never falls and grows over {len(ends)} steps, "
        f"{mb(per_step)} a step ({mb(ends[0])} -> {mb(ends[-1])}): something keeps tensors across steps, a leak. "
        f"Fix: {fix('MEMORY_GROWTH', program)}"
    )
    return make("MEMORY_GROWTH", per_step / 1e6, t.MEMORY_GROWTH, msg)


def fragmentation(dev: str, m: MemoryPeak, t: Thresholds, program: Program) -> Finding | None:
    reserved = m.reserved_at_peak_bytes
    if not reserved:
        return None
    free = reserved - m.allocated_peak_bytes
    value = free * 100.0 / reserved
    if value < t.FRAGMENTATION or free / 1e6 < t.min_fragmentation_mb:
        return None
    msg = (
        f"GPU {dev}: at the allocated peak ({mb(m.allocated_peak_bytes)}) the caching allocator holds "
        f"{mb(reserved)}: {value:.0f}% of it ({mb(free)}) reserved but not allocated, cached blocks too "
        f"fragmented to reuse. Fix: {fix('FRAGMENTATION', program)}"
    )
    return make("FRAGMENTATION", value, t.FRAGMENTATION, msg)
