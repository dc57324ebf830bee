"""``RECOMPILES``: Dynamo compiling again and again inside the steps of a compiled program.

A ``torch.compile`` program compiles in its first steps; one that keeps compiling later (a shape
or a Python value its guards check changes from step to step, ``dynamic=False`` fed a new length
each step) pays the compilation's host time in every step it recurs in, while the GPU waits. The
value is the share of the steps in which a compilation began (:mod:`traceconv.analyses.compiled.compiles`),
reported from :attr:`Thresholds.RECOMPILES` % and at least two steps; the saving is the
compilations' host time per step, and the severity comes from it as for every time finding.
"""

from __future__ import annotations

import numpy as np

from traceconv.analyses.compiled import Compiled
from traceconv.analyses.compiled.compiles import step_of
from traceconv.analyses.finding import Finding, saving_severity
from traceconv.analyses.prepare import Program
from traceconv.analyses.summary.advice import fix
from traceconv.analyses.summary.findings import PYTORCH
from traceconv.analyses.summary.measure import ScopeStats
from traceconv.analyses.summary.timed import costly
from traceconv.analyses.thresholds import DEFAULTS, Thresholds
from traceconv.units import ms

MIN_STEPS = 2  # a compilation in one step is warm-up or a one-off, not a recurring cost


def recompiles(
    stats: ScopeStats, made: Compiled | None, t: Thresholds = DEFAULTS, program: Program = PYTORCH
) -> Finding | None:
    """The finding, measured on the steps (a profile without steps cannot tell warm-up from recurrence)."""
    scope = stats.scope
    if made is None or not made.compiles or scope.name != "steps" or not scope.steps:
        return None
    slot = step_of(made.compiles, scope.start_ns, scope.end_ns)
    inside = [c for c, s in zip(made.compiles, slot, strict=True) if s >= 0]
    steps = len(np.unique(slot[slot >= 0]))
    value = steps * 100.0 / scope.steps
    cost = sum(c.dur_ns for c in inside)
    if steps < MIN_STEPS or value < t.RECOMPILES or not costly(stats, cost, t):
        return None
    saving = cost / scope.steps
    pct = saving * 100.0 / scope.step_ns if scope.step_ns else 0.0
    regions = [c.region.removeprefix("Torch-Compiled Region: ") for c in inside if c.region]
    made_words = f" (compiled regions {', '.join(regions[:6])}{' ...' if len(regions) > 6 else ''})" if regions else ""
    msg = (
        f"Dynamo compiles {len(inside)} times in {steps} of {scope.steps} steps{made_words}: "
        f"{ms(cost)} of host time, {ms(saving)} a step, while the GPU waits; fixing it would win about "
        f"{ms(saving)} a step ({pct:.0f}%). Fix: {fix('RECOMPILES', program)}"
    )
    return Finding("RECOMPILES", saving_severity(pct), msg, round(value, 2), t.RECOMPILES, round(saving), round(pct, 1))
