"""``traceconv whatif``: what a step would take if a cost went away, and the critical path of each step.

:func:`whatif` builds the dependency graph of the steps' process (:mod:`.graph`: the host's CUDA
calls in order, the GPU work each launched, in order per stream, and the calls that wait for the
GPU), replays it unchanged and with the changes asked for (:mod:`.replay`, :mod:`.changes`), and
measures the steps of both as :mod:`traceconv.analyses.steps` defines them (each from the previous
step's completion to its own; :mod:`.model`). Unchanged, the replay reproduces the trace's own
times, so the prediction is the trace's step time moved by what the change does in the graph.
:mod:`.path` breaks each step's time into the parts of its critical path. On several ranks every
rank is replayed, coupled through the collectives matched across them (:mod:`.coupled`,
:mod:`.job`), and the job's step is the slowest rank's. On one rank, the graph is kept in the
Source's database and replayed a window of calls at a time (:mod:`.store`), both replays in one
pass, so that memory stays flat as traces grow.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from traceconv.analyses.prepare import as_source, prepare
from traceconv.analyses.ranks import several
from traceconv.analyses.results import plain
from traceconv.analyses.source import Source
from traceconv.analyses.steps import STEP_PATTERN
from traceconv.analyses.whatif import changes as CH
from traceconv.analyses.whatif.job import whatif_ranks
from traceconv.analyses.whatif.model import Measure, Measured, Model, critical_path, measure, model
from traceconv.analyses.whatif.replay import Carry, Change, replay
from traceconv.analyses.whatif.replay import prepare as prepare_replay
from traceconv.analyses.whatif.result import RankStep, WhatIf
from traceconv.errors import UsageError

__all__ = ["Model", "RankStep", "WhatIf", "as_dict", "model", "predict", "whatif"]


def whatif(
    data: pa.Table | Source,
    removes: list[str],
    scales: list[str],
    step_pattern: str = STEP_PATTERN,
    rank: str | None = None,
) -> WhatIf:
    """The steps before and as predicted after the changes (``--remove``, ``--scale`` specs); on
    several ranks, every rank's and the job's, the change applied on every rank or on ``rank`` alone."""
    source = as_source(data)
    facts = prepare(source, step_pattern)
    if facts.steps is not None and several(source):
        return whatif_ranks(source, facts, removes, scales, step_pattern, rank)
    m = model(source, step_pattern, facts)
    if rank is not None:
        raise UsageError(None, f"--rank {rank}: the input holds one rank", "leave --rank out, or add the other ranks")
    base, after, matched = _replayed(m, removes, scales)
    measured = m.measured_ns
    predicted = measured + after.pace - base.pace  # the replay's own error cancels
    notes = [n for c in matched for n in c.notes]
    if base.pace != measured:
        notes.append(f"the unchanged replay gives {base.pace:,} ns a step against {measured:,} measured")
    return WhatIf(
        source=m.facts.source,
        steps=base.count,
        step_ns=measured,
        predicted_step_ns=predicted,
        saving_ns=measured - predicted,
        saving_pct=round((measured - predicted) * 100.0 / measured, 1) if measured else 0.0,
        critical_path=critical_path(base),
        predicted_critical_path=critical_path(after),
        changed=matched,
        notes=notes,
    )


def predict(m: Model, change: Change) -> int:
    """The median step with ``change``, made of the whole graph (for the findings' savings)."""
    return m.measured_ns + measure(m, replay(m.graph, m.prepared, change), spans=False).pace - m.replayed_ns


def _replayed(m: Model, removes: list[str], scales: list[str]) -> tuple[Measured, Measured, list[CH.Matched]]:
    """The graph replayed unchanged and with the changes asked for, a window at a time, both measured;
    and what each change matched."""
    changes = CH.Changes(removes, scales)
    measures, carries = (Measure(m), Measure(m)), (Carry(), Carry())
    last: dict[int, int] = {}  # per lane, the end of its last row launched so far
    for g in m.store.windows():
        p = prepare_replay(g, last)
        for change, carry, out in zip((Change.none(g), changes.of(g)), carries, measures, strict=True):
            out.add(g, p, replay(g, p, change, carry=carry))
    assert m.facts.steps is not None
    return measures[0].done(), measures[1].done(), changes.matched(m.facts.steps.count)


def as_dict(r: WhatIf) -> dict[str, Any]:
    out: dict[str, Any] = plain(r)
    return out
