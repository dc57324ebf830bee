"""One process's steps ready to be replayed (:class:`Model`), and what a replayed timeline says of
them: the steps' windows, their pace and their critical path.

The steps of both the trace and a replay are measured as :mod:`traceconv.analyses.steps` defines
them (each from the previous step's completion to its own).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from traceconv.analyses import intervals as I
from traceconv.analyses.prepare import Facts, prepare
from traceconv.analyses.results import CriticalPath
from traceconv.analyses.source import Source
from traceconv.analyses.steps import STEP_PATTERN, Launched, windows
from traceconv.analyses.summary.attribution import syncs as Y
from traceconv.analyses.whatif import path as P
from traceconv.analyses.whatif.graph import Graph, build
from traceconv.analyses.whatif.replay import Change, Timeline, replay
from traceconv.analyses.whatif.replay import prepare as prepare_replay
from traceconv.errors import UsageError

TOP_ITEMS = 5


@dataclass(frozen=True)
class Model:
    """An input ready to be replayed: its facts, graph and what the replay needs. The graph replayed
    unchanged is made where it is needed (:func:`unchanged`), not kept: it holds a few numbers per
    call and GPU row, as much as a changed replay."""

    facts: Facts
    graph: Graph
    prepared: Any

    @property
    def measured_ns(self) -> int:
        """The median step as the program lived it."""
        return self.facts.steps.median_ns if self.facts.steps is not None else 0

    @functools.cached_property
    def replayed_ns(self) -> int:
        """The steps' pace in the graph replayed unchanged: what a prediction is measured against,
        so that the replay's own error cancels."""
        base = unchanged(self)
        return pace(self, base, step_windows(self, base))


def model(
    source: Source, step_pattern: str = STEP_PATTERN, facts: Facts | None = None, classified: bool = False
) -> Model:
    """The steps' graph and its replay without a change (``facts``: :func:`prepare`'s, if made;
    ``classified``: the input's syncs are classified already)."""
    facts = facts if facts is not None else prepare(source, step_pattern)
    if facts.steps is None:
        raise UsageError(
            None, "the input marks no steps: a what-if predicts a step", "mark steps, or name them with --steps REGEX"
        )
    if not classified:
        classify(source)
    g = build(source, facts.steps)
    if not len(g.gpu.start):
        raise UsageError(None, "the steps' process launched no GPU work", "profile with CUDA activities on")
    return Model(facts, g, prepare_replay(g))


def unchanged(m: Model) -> Timeline:
    """The graph replayed without a change: the trace's own times, but for the replay's errors."""
    return replay(m.graph, m.prepared, Change.none(m.graph))


def classify(source: Source) -> None:
    """The input's host-blocking syncs, classified (the graph's waits), once per input."""
    Y.prepare_calls(source)
    Y.classify(source)


def step_windows(m: Model, t: Timeline) -> tuple[I.I64, I.I64]:
    """The steps' windows in a replayed timeline: their host ranges moved with the host, their GPU
    work where the replay put it."""
    st, c, r = m.facts.steps, m.graph.calls, m.graph.gpu
    assert st is not None
    host_start, host_end = moved(m, t, st.cpu_start_ns), moved(m, t, st.cpu_end_ns)
    anchor = np.where(r.call >= 0, c.start[np.maximum(r.call, 0)], r.start)
    k = np.searchsorted(st.cpu_start_ns, anchor, side="right") - 1
    inside = (k >= 0) & (anchor < st.cpu_end_ns[np.maximum(k, 0)])
    first = np.full(st.count, np.iinfo(np.int64).max, np.int64)
    last = np.full(st.count, np.iinfo(np.int64).min, np.int64)
    np.minimum.at(first, k[inside], t.gpu_start[inside])
    np.maximum.at(last, k[inside], t.gpu_end[inside])
    launched = np.zeros(st.count, np.bool_)
    launched[k[inside]] = True
    earlier = anchor < st.cpu_start_ns[0]
    before = int(t.gpu_end[earlier].max()) if earlier.any() else None
    return windows(host_start, host_end, Launched(first, last, launched, before))


def critical_path(m: Model, t: Timeline, w: tuple[I.I64, I.I64]) -> CriticalPath:
    g = m.graph
    starts, ends = w
    waits = m.prepared.waits
    spans = P.Spans(
        gpu=(t.gpu_start, t.gpu_end, g.gpu.klass),
        queued=I.union(*_queued(g, t)),
        waits=I.union(t.call_start[waits], t.call_end[waits]),
        ops=g.ranges,
    )
    parts = P.per_step(spans, starts, ends)
    dur = ends - starts
    mid = int(np.argsort(dur, kind="stable")[len(dur) // 2])
    medians = {p: round(float(v)) for p, v in zip(P.PARTS, np.median(parts, axis=0), strict=True)}
    return CriticalPath(
        int(dur[mid]), dict(zip(P.PARTS, (int(v) for v in parts[mid]), strict=True)), medians, _longest(g, t, w)
    )


def pace(m: Model, t: Timeline, w: tuple[I.I64, I.I64]) -> int:
    """The steps' pace in a timeline: the median window, but no faster than the host issues steps.
    A short capture whose host ran ahead leaves a backlog on the GPU; a change that speeds the GPU up
    drains it at the GPU's pace for the few steps replayed, while in the steady state the host's
    pace bounds the step."""
    st = m.facts.steps
    assert st is not None
    host = moved(m, t, st.cpu_end_ns) - moved(m, t, st.cpu_start_ns)
    return max(round(float(np.median(w[1] - w[0]))), round(float(np.median(host))))


def moved(m: Model, t: Timeline, times: I.I64) -> I.I64:
    """Host times moved as the replay moved the last call that started at or before each."""
    c = m.graph.calls
    at = np.searchsorted(c.start, times, side="right") - 1
    return times + np.where(at >= 0, (t.call_start - c.start)[np.maximum(at, 0)], 0)


def _queued(g: Graph, t: Timeline) -> tuple[I.I64, I.I64]:
    """Each launched row from its launching call's end to its start (where it waited to start)."""
    r = g.gpu
    launched = r.call >= 0
    s = t.call_end[r.call[launched]]
    e = t.gpu_start[launched]
    keep = e > s
    return s[keep], e[keep]


def _longest(g: Graph, t: Timeline, w: tuple[I.I64, I.I64]) -> list[dict[str, Any]]:
    """The GPU work that took most of the steps' time, per step."""
    starts, ends = w
    inside = (t.gpu_start >= starts[0]) & (t.gpu_end <= ends[-1])
    codes = g.gpu.name.codes[inside]
    dur = (t.gpu_end - t.gpu_start)[inside]
    totals = np.bincount(codes + 1, weights=dur, minlength=len(g.gpu.name.values) + 1)  # +1: null is -1
    top = np.argsort(-totals, kind="stable")[:TOP_ITEMS]
    names = [None, *g.gpu.name.values]
    return [
        {"name": str(names[k]), "ns_per_step": round(float(totals[k]) / max(len(starts), 1))} for k in top if totals[k]
    ]
