"""``traceconv whatif``: what a step would take if a cost went away, and the critical path of each step.

:func:`whatif` builds the dependency graph of the steps' process (:mod:`.graph`: the host's CUDA
calls in order, the GPU work each launched, in order per stream, and the calls that wait for the
GPU), replays it unchanged and with the changes asked for (:mod:`.replay`, :mod:`.changes`), and
measures the steps of both as :mod:`traceconv.analyses.steps` defines them (each from the previous
step's completion to its own; :mod:`.model`). Unchanged, the replay reproduces the trace's own
times, so the prediction is the trace's step time moved by what the change does in the graph.
:mod:`.path` breaks each step's time into the parts of its critical path. On several ranks every
rank is replayed, coupled through the collectives matched across them (:mod:`.coupled`,
:mod:`.job`), and the job's step is the slowest rank's.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from traceconv.analyses.prepare import as_source, prepare
from traceconv.analyses.ranks import several
from traceconv.analyses.results import CriticalPath, plain
from traceconv.analyses.source import Source
from traceconv.analyses.steps import STEP_PATTERN
from traceconv.analyses.whatif import changes as CH
from traceconv.analyses.whatif.job import whatif_ranks
from traceconv.analyses.whatif.model import Model, critical_path, model, pace, step_windows, unchanged
from traceconv.analyses.whatif.replay import Change, Timeline, replay
from traceconv.analyses.whatif.result import RankStep, WhatIf
from traceconv.errors import UsageError

__all__ = ["Model", "RankStep", "WhatIf", "as_dict", "model", "predict", "step_windows", "whatif"]


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
    # One replay at a time: each holds a few numbers per call and GPU row.
    count, replayed, path = _measured(m, unchanged(m))
    after, matched = _changed(m, removes, scales)
    _, moved, predicted_path = _measured(m, after)
    measured = m.measured_ns
    predicted = measured + moved - replayed  # the replay's own error cancels
    notes = [n for c in matched for n in c.notes]
    if replayed != measured:
        notes.append(f"the unchanged replay gives {replayed:,} ns a step against {measured:,} measured")
    return WhatIf(
        source=m.facts.source,
        steps=count,
        step_ns=measured,
        predicted_step_ns=predicted,
        saving_ns=measured - predicted,
        saving_pct=round((measured - predicted) * 100.0 / measured, 1) if measured else 0.0,
        critical_path=path,
        predicted_critical_path=predicted_path,
        changed=matched,
        notes=notes,
    )


def predict(m: Model, change: Change) -> int:
    """The median step with ``change`` (for the findings' savings)."""
    after = replay(m.graph, m.prepared, change)
    return m.measured_ns + pace(m, after, step_windows(m, after)) - m.replayed_ns


def _changed(m: Model, removes: list[str], scales: list[str]) -> tuple[Timeline, list[CH.Matched]]:
    """The graph replayed with the changes asked for, and what each matched (the change itself let go)."""
    change, matched = CH.parse(m.graph, removes, scales)
    return replay(m.graph, m.prepared, change), matched


def _measured(m: Model, t: Timeline) -> tuple[int, int, CriticalPath]:
    """A replayed timeline's steps: how many, their pace, and the critical path."""
    w = step_windows(m, t)
    return len(w[0]), pace(m, t, w), critical_path(m, t, w)


def as_dict(r: WhatIf) -> dict[str, Any]:
    out: dict[str, Any] = plain(r)
    return out
