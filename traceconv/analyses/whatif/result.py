"""What ``whatif`` answers: the step before and predicted after, and on several ranks each rank's."""

from __future__ import annotations

from dataclasses import dataclass, field

from traceconv.analyses.results import CriticalPath
from traceconv.analyses.whatif.changes import Matched


@dataclass(frozen=True)
class RankStep:
    """One rank's median step, measured, replayed unchanged (with the other ranks) and predicted
    (``changed``: the change applies to it)."""

    rank: int | None
    label: str
    steps: int
    step_ns: int
    predicted_step_ns: int
    changed: bool
    replayed_step_ns: int


@dataclass(frozen=True)
class WhatIf:
    source: str
    steps: int
    step_ns: int  # the median step, as the program lived it (several ranks: the slowest rank's)
    predicted_step_ns: int
    saving_ns: int
    saving_pct: float
    critical_path: CriticalPath  # several ranks: the slowest rank's
    predicted_critical_path: CriticalPath  # several ranks: the rank slowest after the change
    changed: list[Matched]
    notes: list[str]
    ranks: list[RankStep] = field(default_factory=list)  # several ranks: each one's step
    slowest_rank: str | None = None
    predicted_slowest_rank: str | None = None
