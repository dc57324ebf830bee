"""One process's steps ready to be replayed (:class:`Model`), and what a replayed timeline says of
them (:class:`Measure`): the steps' windows, their pace and their critical path.

The steps of both the trace and a replay are measured as :mod:`traceconv.analyses.steps` defines
them (each from the previous step's completion to its own). A replay is measured a window of calls
at a time (:mod:`.store`): per step, only a few numbers are kept, and the spans the critical path
reads are written to disk (:mod:`.kept`), to be read back a batch of steps at a time.
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
from traceconv.analyses.whatif.graph import Graph
from traceconv.analyses.whatif.kept import Kept
from traceconv.analyses.whatif.replay import Change, Timeline, replay
from traceconv.analyses.whatif.replay import prepare as prepare_replay
from traceconv.analyses.whatif.store import Store, store
from traceconv.errors import UsageError

TOP_ITEMS = 5
BATCH_ROWS = 1 << 18  # the critical path reads the spans of about this many GPU rows at a time


@dataclass(frozen=True)
class Model:
    """An input ready to be replayed: its facts, and its graph in the Source's database (read a
    window at a time, or whole: :attr:`graph`)."""

    facts: Facts
    store: Store

    @property
    def measured_ns(self) -> int:
        """The median step as the program lived it."""
        return self.facts.steps.median_ns if self.facts.steps is not None else 0

    @functools.cached_property
    def _whole(self) -> tuple[Graph, Any]:
        g = next(self.store.windows(whole=True))
        return g, prepare_replay(g)

    @property
    def graph(self) -> Graph:
        """The whole graph in memory (several ranks replayed together, the findings' savings)."""
        return self._whole[0]

    @property
    def prepared(self) -> Any:
        return self._whole[1]

    @functools.cached_property
    def replayed_ns(self) -> int:
        """The steps' pace in the graph replayed unchanged: what a prediction is measured against,
        so that the replay's own error cancels."""
        return measure(self, unchanged(self), spans=False).pace


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
    s = store(source, facts.steps)
    if not s.rows:
        raise UsageError(None, "the steps' process launched no GPU work", "profile with CUDA activities on")
    return Model(facts, s)


def unchanged(m: Model) -> Timeline:
    """The whole graph replayed without a change: the trace's own times, but for the replay's errors."""
    return replay(m.graph, m.prepared, Change.none(m.graph))


def classify(source: Source) -> None:
    """The input's host-blocking syncs, classified (the graph's waits), once per input."""
    Y.prepare_calls(source)
    Y.classify(source)


def measure(m: Model, t: Timeline, spans: bool = True) -> Measured:
    """A replay of the whole graph, measured."""
    out = Measure(m, spans)
    out.add(m.graph, m.prepared, t)
    return out.done()


@dataclass(frozen=True)
class Measured:
    """A replay's steps: their windows and pace, and the spans of its critical path (None: not kept)."""

    model: Model
    starts: I.I64
    ends: I.I64
    pace: int
    spans: Kept | None

    @property
    def count(self) -> int:
        return len(self.starts)


class Measure:
    """A replay's steps, measured from its windows, fed in order (:meth:`add`); ``spans``: keep what
    the critical path reads."""

    def __init__(self, m: Model, spans: bool = True) -> None:
        st = m.facts.steps
        assert st is not None
        self.model = m
        self.kept = Kept(m.store.source) if spans else None
        self.first = np.full(st.count, np.iinfo(np.int64).max, np.int64)
        self.last = np.full(st.count, np.iinfo(np.int64).min, np.int64)
        self.launched = np.zeros(st.count, np.bool_)
        self.before: int | None = None
        self.host_start, self.host_end = st.cpu_start_ns.copy(), st.cpu_end_ns.copy()

    def add(self, g: Graph, p: Any, t: Timeline) -> None:
        """A window's replay."""
        st, c, r = g.steps, g.calls, g.gpu
        anchor = np.where(r.call >= 0, c.start[np.maximum(r.call, 0)], r.start)
        k = np.searchsorted(st.cpu_start_ns, anchor, side="right") - 1
        inside = (k >= 0) & (anchor < st.cpu_end_ns[np.maximum(k, 0)])
        np.minimum.at(self.first, k[inside], t.gpu_start[inside])
        np.maximum.at(self.last, k[inside], t.gpu_end[inside])
        self.launched[k[inside]] = True
        earlier = anchor < st.cpu_start_ns[0]
        if earlier.any():
            self.before = max(self.before or np.iinfo(np.int64).min, int(t.gpu_end[earlier].max()))
        for times, base in ((self.host_start, st.cpu_start_ns), (self.host_end, st.cpu_end_ns)):
            _move(times, base, c.start, t.call_start - c.start)
        if self.kept is not None:
            launched = r.call >= 0
            qs, qe = t.call_end[r.call[launched]], t.gpu_start[launched]
            keep = qe > qs
            self.kept.add(
                (t.gpu_start, t.gpu_end, r.klass, r.name.codes),
                (qs[keep], qe[keep]),
                (t.call_start[p.waits], t.call_end[p.waits]),
            )

    def done(self) -> Measured:
        starts, ends = windows(
            self.host_start, self.host_end, Launched(self.first, self.last, self.launched, self.before)
        )
        host = self.host_end - self.host_start
        pace = max(round(float(np.median(ends - starts))), round(float(np.median(host))))
        return Measured(self.model, starts, ends, pace, self.kept)


def _move(times: I.I64, base: I.I64, start: I.I64, shift: I.I64) -> None:
    """Host times (``base``, as in the trace) moved as the replay moved the last call that started at
    or before each, in ``times``: those at or after the window's first call (``start``, their
    ``shift``), which the windows after correct where their calls came later."""
    if not len(start):
        return
    mine = base >= start[0]
    at = np.searchsorted(start, base[mine], side="right") - 1
    times[mine] = base[mine] + shift[at]


def critical_path(r: Measured) -> CriticalPath:
    """The critical path of a replay's steps: the median step's parts, each part's median, and the GPU
    work that took most of the steps' time."""
    kept = r.spans
    assert kept is not None
    starts, ends = r.starts, r.ends
    batch = max(1, len(starts) * BATCH_ROWS // max(kept.rows, 1))
    ops = r.model.store.ops.ranges
    parts = P.per_step(lambda t0, t1: kept.spans(t0, t1, ops), starts, ends, batch)
    dur = ends - starts
    mid = int(np.argsort(dur, kind="stable")[len(dur) // 2])
    medians = {p: round(float(v)) for p, v in zip(P.PARTS, np.median(parts, axis=0), strict=True)}
    return CriticalPath(
        int(dur[mid]), dict(zip(P.PARTS, (int(v) for v in parts[mid]), strict=True)), medians, _longest(r, kept)
    )


def _longest(r: Measured, kept: Kept) -> list[dict[str, Any]]:
    """The GPU work that took most of the steps' time, per step."""
    starts, ends = r.starts, r.ends
    names = [None, *r.model.store.strings]
    totals = kept.totals(int(starts[0]), int(ends[-1]), len(r.model.store.strings))
    top = np.argsort(-totals, kind="stable")[:TOP_ITEMS]
    return [
        {"name": str(names[k]), "ns_per_step": round(float(totals[k]) / max(len(starts), 1))} for k in top if totals[k]
    ]
