"""What a time finding is measured in: a scope's step, a cost per step and its share, and the finding
made of a saving (shared by :mod:`.findings` and :mod:`.matrix`)."""

from __future__ import annotations

from dataclasses import dataclass

from traceconv.analyses.finding import Finding, saving_severity
from traceconv.analyses.summary.measure import ScopeStats
from traceconv.analyses.thresholds import Thresholds
from traceconv.units import ms


@dataclass(frozen=True)
class Per:
    """A scope's step and what its GPUs' idle gaps cost a step, by cause (per GPU)."""

    step_ns: int
    steps: int
    devices: int

    def per_step(self, ns: float) -> float:
        return ns / max(self.steps, 1) / max(self.devices, 1)

    def pct(self, per_step: float) -> float:
        return per_step * 100.0 / self.step_ns if self.step_ns else 0.0


def per_of(stats: ScopeStats) -> Per:
    return Per(stats.scope.step_ns, stats.scope.steps, max(len(stats.gpu), 1))


def costly(stats: ScopeStats, cost_ns: float, t: Thresholds) -> bool:
    """Whether a cost (copy time, idle time) in the scope is worth a finding: at least
    ``min_cost_ms`` in all, and at least ``min_cost_pct`` of a step."""
    step = stats.scope.step_ns
    per_step = cost_ns / max(stats.scope.steps, 1)
    return cost_ns >= t.min_cost_ms * 1e6 and (not step or per_step * 100.0 >= t.min_cost_pct * step)


def timed(code: str, value: float, threshold: float, message: str, per: Per, saving: float) -> Finding:
    """A finding about time: its severity from what its fix would win a step."""
    pct = per.pct(saving)
    return Finding(code, saving_severity(pct), message, round(value, 2), threshold, round(saving), round(pct, 1))


def wins(per: Per, saving: float) -> str:
    return f"fixing it would win about {ms(saving)} a step ({per.pct(saving):.0f}%)"


def where(stats: ScopeStats) -> str:
    s = stats.scope
    return f"in {s.steps} steps" if s.name == "steps" else "in the profiled window"
