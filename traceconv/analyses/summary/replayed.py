"""Findings' savings from the what-if replay: the step replayed without what a finding blames.

A finding's first estimate of what its fix would win comes from the GPU's idle gaps charged to
their cause (:mod:`~traceconv.analyses.summary.timeline.gaps`). Where the fix is a change the
step's dependency graph can replay (:mod:`traceconv.analyses.whatif`), the saving becomes that
prediction: the median step as measured less the step replayed with the change. The replay knows
what the gaps cannot: a host that is the limit anyway gains nothing from not waiting, and the
GPU work that queued behind a sync runs at once without it, and the host's dispatch of the
operators stays when only its data pipeline goes.

The replay is made for inputs of up to :data:`MAX_ROWS` GPU rows and CUDA calls (a few seconds);
above it the gaps' estimate stays, and a note says so.
"""

from __future__ import annotations

import dataclasses
import re

from traceconv.analyses.finding import Finding, saving_severity
from traceconv.analyses.prepare import Facts
from traceconv.analyses.source import Source
from traceconv.analyses.vocabulary import kind_counts
from traceconv.errors import UsageError
from traceconv.units import ms

# The changes that stand for each finding's fix (``whatif --remove`` specs), and what they take away.
CHANGES: dict[str, tuple[list[str], str]] = {
    "SYNC_STALLS": (["syncs"], "them"),
    "HOST_DEVICE_COPIES": (["copies:HtoD", "copies:DtoH"], "them"),
}
# GPU_IDLE's fix, where the host mostly did its own work outside every operator (a data pipeline,
# Python between steps): that work out of the step.
IDLE_OUTSIDE_OPS = (["host:outside-ops"], "the host's work outside every operator")
MAX_ROWS = 400_000
_WINS = re.compile(r"fixing it would win about [^;)]*\([0-9.]+%\)")


def with_replayed_savings(
    source: Source, facts: Facts, findings: list[Finding], step_pattern: str, idle_cause: str | None = None
) -> tuple[list[Finding], list[str]]:
    """``findings`` with the savings of those whose fix the graph can replay; and notes. ``idle_cause``:
    what the host mostly did while the GPU waited (:func:`~traceconv.analyses.summary.findings.idle_cause`)."""
    changes = dict(CHANGES)
    if idle_cause == "outside_ops":
        changes["GPU_IDLE"] = IDLE_OUTSIDE_OPS
    todo = [f for f in findings if f.code in changes]
    steps = facts.steps
    if not todo or steps is None or not steps.median_ns:
        return findings, []
    counts = kind_counts(source)
    rows = sum(counts.get(k, 0) for k in ("kernel", "memcpy", "memset", "cuda_api"))
    if rows > MAX_ROWS:
        return findings, [
            f"savings estimated from the GPU's idle gaps, not replayed ({rows:,} GPU rows and CUDA calls; "
            f"traceconv whatif replays them)"
        ]
    from traceconv.analyses.whatif import model, predict  # the what-if builds on the summary's parts
    from traceconv.analyses.whatif.changes import parse

    try:
        m = model(source, step_pattern, facts)
    except UsageError:
        return findings, []
    out = []
    for f in findings:
        if f.code not in changes:
            out.append(f)
            continue
        specs, without = changes[f.code]
        change, _ = parse(m.graph, specs, [])
        saving = max(steps.median_ns - predict(m, change), 0)
        pct = saving * 100.0 / steps.median_ns
        wins = f"fixing it would win about {ms(saving)} a step ({pct:.0f}%: the step replayed without {without})"
        message = _WINS.sub(wins, f.message, count=1)
        out.append(
            dataclasses.replace(
                f, saving_ns=round(saving), saving_pct=round(pct, 1), severity=saving_severity(pct), message=message
            )
        )
    return out, []
