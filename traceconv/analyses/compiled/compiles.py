"""Dynamo's compilations in the profile: when each ran, for how long, and which region it made.

Dynamo times its work in host ranges (``dynamo_timed``): ``entire_frame_compile`` around one
frame's compilation, ``_compile.compile_inner (dynamo_timed)`` and ``compile_attempt_N`` inside
it. Overlapping compile ranges are one compilation (their union); its host time is that union's
length. The region it made is the first ``Torch-Compiled Region: F/N`` not seen before it began
(Dynamo numbers a frame's compilations: N > 0 is a recompilation). A profile without these ranges
(Nsight Systems records no Dynamo ranges unless NVTX is emitted) has no compilations: nothing is
said about them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceconv.analyses import intervals as I
from traceconv.analyses.compiled.regions import first_seen
from traceconv.analyses.prepare import OP_KINDS, host_names
from traceconv.analyses.source import Source

COMPILE_RANGES = ("entire_frame_compile", "_compile.compile_inner (dynamo_timed)")
COMPILE_PREFIX = "compile_attempt_"
_SQL = f"""
SELECT start_ns, end_ns FROM events
WHERE kind IN ('cpu_op', 'nvtx') AND end_ns IS NOT NULL AND (device IS NULL OR kind <> 'nvtx')
  AND (name IN {COMPILE_RANGES} OR starts_with(name, '{COMPILE_PREFIX}'))
"""


@dataclass(frozen=True)
class Compile:
    """One compilation: its host range (the union of Dynamo's compile ranges) and the region it made."""

    start_ns: int
    dur_ns: int
    region: str | None  # e.g. "Torch-Compiled Region: 0/4"; None when no new region followed


def compiles(source: Source) -> list[Compile]:
    """Every compilation in the profile, in time order."""
    if not any(compiling(n) for k, n in host_names(source) if k in OP_KINDS and n is not None):
        return []
    ranges = source.frame(_SQL)
    start, end = I.union(
        ranges["start_ns"].to_numpy(np.int64, na_value=0), ranges["end_ns"].to_numpy(np.int64, na_value=0)
    )
    return [
        Compile(int(s), int(e - s), region)
        for s, e, region in zip(start, end, _made(first_seen(source), start), strict=True)
    ]


def compiling(name: str) -> bool:
    """Whether a host range of this name is one of Dynamo's compile ranges (:data:`_SQL`'s test)."""
    return name in COMPILE_RANGES or name.startswith(COMPILE_PREFIX)


def _made(seen: pd.DataFrame, starts: I.I64) -> list[str | None]:
    """For each compilation (by its start), the first region first seen after it began and before the next one."""
    names = seen["name"].astype(str).to_numpy()
    firsts = seen["start_ns"].to_numpy(np.int64)
    out: list[str | None] = []
    for i, s in enumerate(starts):
        nxt = starts[i + 1] if i + 1 < len(starts) else np.iinfo(np.int64).max
        after = np.flatnonzero((firsts >= s) & (firsts < nxt))
        out.append(str(names[after[0]]) if len(after) else None)
    return out


def step_of(items: list[Compile], starts: I.I64, ends: I.I64) -> I.I64:
    """For each compilation, the window ``[starts[i], ends[i])`` it began in (sorted, disjoint windows), else -1."""
    at = np.array([c.start_ns for c in items], np.int64)
    if not len(starts):
        return np.full(len(at), -1, np.int64)
    slot = np.searchsorted(starts, at, side="right") - 1
    inside = (slot >= 0) & (at < ends[np.clip(slot, 0, None)])
    return np.where(inside, slot, -1).astype(np.int64)
