"""A step's critical path in words, the same in ``summary`` and ``whatif``."""

from __future__ import annotations

from traceconv.analyses.results import CriticalPath
from traceconv.units import ms

PART_WORDS = {
    "gpu_compute": "GPU compute",
    "gpu_copies": "GPU copies",
    "gpu_communication": "GPU communication",
    "sync_wait": "sync waits",
    "launch": "launch overhead",
    "host_ops": "host in operators and ranges",
    "host_other": "other host time",
    "gpu_wait": "GPU waits on itself",
}


def path_line(p: CriticalPath) -> str:
    """ "Critical path of the median step (19.84 ms): GPU compute 12.59 ms, launch overhead 3.42 ms, ..." """
    parts = sorted(((v, k) for k, v in p.parts.items() if v), reverse=True)
    said = ", ".join(f"{PART_WORDS[k]} {ms(v)}" for v, k in parts)
    return f"Critical path of the median step ({ms(p.step_ns)}): {said}"


def path_change(before: CriticalPath, after: CriticalPath) -> str:
    """ "Critical path of the median step: host in operators and ranges 26.28 -> 2.08 ms, ..." (the parts
    that changed most first)."""
    keys = sorted(PART_WORDS, key=lambda k: -abs(after.parts.get(k, 0) - before.parts.get(k, 0)))
    said = ", ".join(
        f"{PART_WORDS[k]} {before.parts.get(k, 0) / 1e6:,.2f} -> {after.parts.get(k, 0) / 1e6:,.2f} ms"
        for k in keys
        if before.parts.get(k, 0) or after.parts.get(k, 0)
    )
    return f"Critical path of the median step: {said}"
