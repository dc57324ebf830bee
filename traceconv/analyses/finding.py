"""A finding: a problem with a stable code, the evidence, the fix, and what the fix would win.

The type every analysis reports its findings in (``summary``, ``ranks``), with the two ways a
severity is set: by what the fix would win, in % of the step (:func:`saving_severity`), or, for a
finding that cannot say, by how far past its threshold the value is (:func:`make`); and the order
they are shown in (:func:`ordered`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# Codes whose value is bad when it is *below* the threshold.
BELOW = frozenset({"LOW_OCCUPANCY", "LOW_SM_ACTIVITY", "LOW_MFU"})
SEVERITIES = ("high", "medium", "low")
HIGH_PCT, MEDIUM_PCT = 25.0, 5.0  # a time finding's severity: what its fix would win, in % of the step


@dataclass(frozen=True)
class Finding:
    code: str
    severity: str
    message: str
    value: float
    threshold: float
    saving_ns: int | None = None  # per step (per GPU): what the fix would win, estimated; None: not a time finding
    saving_pct: float | None = None  # saving_ns in % of the step time

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


MEMORY_CODES = frozenset({"MEMORY_GROWTH", "FRAGMENTATION"})


def ordered(findings: Sequence[Finding]) -> list[Finding]:
    """Time findings by saving, most first; then the others, most severe and furthest past their
    threshold first; memory findings last."""

    def key(f: Finding) -> tuple[int, float, int, float]:
        memory = f.code in MEMORY_CODES
        saving = -(f.saving_ns or 0) if f.saving_ns is not None else 0
        return (2 if memory else 0 if f.saving_ns is not None else 1, saving, SEVERITIES.index(f.severity), -ratio(f))

    return sorted(findings, key=key)


def _severity(value: float, threshold: float, below: bool = False) -> str:
    ratio = (threshold / value if value else float("inf")) if below else (value / threshold if threshold else 0.0)
    return "high" if ratio >= 3 else "medium" if ratio >= 1.5 else "low"


def saving_severity(pct: float) -> str:
    return "high" if pct >= HIGH_PCT else "medium" if pct >= MEDIUM_PCT else "low"


def ratio(f: Finding) -> float:
    if f.code in BELOW:
        return f.threshold / f.value if f.value else float("inf")
    return f.value / f.threshold if f.threshold else 0.0


def make(code: str, value: float, threshold: float, message: str, below: bool = False) -> Finding:
    """A finding whose severity is how far past its threshold the value is (memory, ranks)."""
    return Finding(code, _severity(value, threshold, below), message, round(value, 2), threshold)
