"""What a user asks to change (``--remove WHAT``, ``--scale WHAT=FACTOR``), as a :class:`Change` of the graph.

``--remove syncs``: the host-blocking syncs (result waits and staging) no longer wait.
``--remove copies[:HtoD|DtoH|DtoD]``: those copies take no GPU time, the calls that waited for
them (staging, synchronous copies, the stream sync right after a staged copy) no longer wait, and
the host work that made what an HtoD copy carries (the host's time right before its call: the
tensor built on the CPU, the numpy step of a round trip) goes with it, as when the data is made
on the GPU instead. ``--remove op:REGEX``: the matching operators'
host time and the GPU work they launched. ``--remove host:outside-ops``: the host's time outside
every operator and annotation (steps aside): a data pipeline, Python between steps; where the
trace has no operators around its launches (nsys without ``--pytorch=autograd-nvtx``), only the
gaps of at least :data:`~traceconv.analyses.prepare.LAUNCH_GAP_NS` between calls: the shorter ones
are the operators' dispatch.
``--scale kernel:REGEX=F``: the matching kernels' durations times F; ``--scale op:REGEX=F``: the
matching operators' host time and GPU work; ``--scale host=F``: the host's time between calls;
``--scale launch=F``: the launch calls' own time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from traceconv.analyses import intervals as I
from traceconv.analyses.prepare import LAUNCH_GAP_NS
from traceconv.analyses.whatif.graph import Coded, Graph
from traceconv.analyses.whatif.replay import NO_WAIT_NS, Change
from traceconv.errors import UsageError

COPY_DIRECTIONS = ("HtoD", "DtoH", "DtoD", "HtoH", "PtoP")
EXAMPLES = "e.g. --remove syncs, --remove copies:HtoD, --remove op:aten::nonzero, --scale kernel:gemm=0.5"


@dataclass
class Matched:
    """What a change matched in the steps, per step: calls, GPU rows, and the host and GPU time they took."""

    what: str
    calls: float = 0.0
    gpu_rows: float = 0.0
    host_ns: int = 0
    gpu_ns: int = 0
    notes: list[str] = field(default_factory=list)


def parse(g: Graph, removes: list[str], scales: list[str]) -> tuple[Change, list[Matched]]:
    """The changes asked for of a whole graph, applied together, and what each matched."""
    changes = Changes(removes, scales)
    return changes.of(g), changes.matched(g.steps.count)


class Changes:
    """The changes asked for, made a window of the process's calls at a time (:mod:`.store`), in
    order: what the host did before a window (its reach, the last call that issued a copy) goes on
    to the next, and what each change matched adds up."""

    def __init__(self, removes: list[str], scales: list[str]) -> None:
        self.specs = [(True, spec) for spec in removes] + [(False, spec) for spec in scales]
        self._state = [_Spec() for _ in self.specs]
        self._reach: int | None = None  # the latest end of the calls before the window

    def of(self, g: Graph) -> Change:
        """The window's change: every change asked for, applied together."""
        c = Change.none(g)
        gaps = self._host_gaps(g)
        for (removing, spec), st in zip(self.specs, self._state, strict=True):
            one = Change.none(g)
            (_remove if removing else _scale)(g, spec, gaps, one, st)
            _per_step(g, st, one)
            c = _both(c, one)
        return c

    def matched(self, steps: int) -> list[Matched]:
        """What each change matched in the steps, per step (``steps``: how many)."""
        n = max(steps, 1)
        out = []
        for (removing, spec), st in zip(self.specs, self._state, strict=True):
            m = Matched(f"{'remove' if removing else 'scale'} {spec}")
            m.calls = round(float(st.calls) / n, 1)
            m.gpu_rows = round(float(st.rows) / n, 1)
            m.host_ns = round(-float(st.host) / n)
            m.gpu_ns = round(st.gpu / n)
            if st.pattern is not None and not st.hit:
                m.notes.append(f"no operator matches {st.pattern!r}")
            out.append(m)
        return out

    def _host_gaps(self, g: Graph) -> _Gaps:
        c = g.calls
        if not len(c.start):
            return _Gaps(c.start, c.start)
        first = int(c.start[0]) if self._reach is None else self._reach
        reach = np.maximum.accumulate(np.maximum(c.end, first) if self._reach is not None else c.end)
        before = np.concatenate(([first], reach[:-1]))
        self._reach = int(reach[-1])
        return _Gaps(np.minimum(before, c.start), c.start)


@dataclass
class _Spec:
    """One change's state across the windows: what it matched so far, and what the next window needs."""

    calls: int = 0  # the calls it changed in the steps
    rows: int = 0  # the GPU rows
    host: int = 0  # the host time it added there (negative: removed)
    gpu: float = 0.0  # the GPU time it removed there
    issued: bool = False  # the last call before the window issued a removed copy
    pattern: str | None = None  # an operator change's pattern ...
    hit: bool = False  # ... and whether it matched something
    spans: tuple[I.I64, I.I64] | None = None  # the union of the operators it matches


def _both(a: Change, b: Change) -> Change:
    """``a`` with ``b`` applied too, in place: a change holds a few arrays per call."""
    np.add(a.host, b.host, out=a.host)
    np.add(a.call, b.call, out=a.call)
    np.multiply(a.gpu, b.gpu, out=a.gpu)
    np.logical_or(a.no_wait, b.no_wait, out=a.no_wait)
    return a


def _per_step(g: Graph, st: _Spec, one: Change) -> None:
    """What the change did inside the steps (calls that start in a step's host range, GPU rows they
    launched), added to ``st``."""
    steps, c, r = g.steps, g.calls, g.gpu
    k = np.searchsorted(steps.cpu_start_ns, c.start, side="right") - 1
    inside = (k >= 0) & (c.start < steps.cpu_end_ns[np.maximum(k, 0)])
    rows = (r.call >= 0) & inside[np.maximum(r.call, 0)]
    st.calls += int((inside & (one.no_wait | (one.host != 0) | (one.call != 0))).sum())
    st.rows += int((rows & (one.gpu != 1.0)).sum())
    st.host += int(one.host[inside].sum() + one.call[inside].sum())
    st.gpu += float(((r.end - r.start) * (1.0 - one.gpu))[rows].sum())


@dataclass(frozen=True)
class _Gaps:
    """The host's time before each call: from the end of the calls before it to its start."""

    start: I.I64
    end: I.I64

    def covered(self, segments: tuple[I.I64, I.I64]) -> I.I64:
        """How much of each gap the segments (sorted, disjoint) cover."""
        return I.covered_below(*segments, self.end) - I.covered_below(*segments, self.start)


def _remove(g: Graph, spec: str, gaps: _Gaps, one: Change, st: _Spec) -> None:
    host, call, gpu, no_wait = one.host, one.call, one.gpu, one.no_wait
    what, _, arg = spec.partition(":")
    c, r = g.calls, g.gpu
    if what == "syncs" and not arg:
        hit = c.sync
        no_wait |= hit
    elif what == "copies":
        if arg and arg not in COPY_DIRECTIONS:
            raise UsageError(
                None, f"--remove copies:{arg}: not a copy direction", f"choose from {', '.join(COPY_DIRECTIONS)}"
            )
        rows = r.kind.eq("memcpy") & (r.copy_kind.eq(arg) if arg else True)
        gpu[rows] = 0.0
        issuing = np.zeros(len(c.start), np.bool_)
        issuing[r.call[rows & (r.call >= 0)]] = True
        # the calls that waited for them (their own staging, the stream sync right after), no longer wait
        staged = issuing | (c.staging & np.r_[st.issued, issuing[:-1]])
        st.issued = bool(issuing[-1]) if len(issuing) else st.issued
        no_wait |= staged
        # a pageable copy's call returns once the runtime has staged it, often before the copy
        # ends: no wait, but its time is the copy's; it keeps a launch's cost
        own = c.end - c.start
        call[issuing] -= np.maximum(own[issuing] - NO_WAIT_NS, 0)
        # the host work that made what an HtoD copy carries: the host's time since the last call before
        # it that launched GPU work or waited (bookkeeping calls, cudaStreamIsCapturing ..., aside)
        uploads = np.zeros(len(c.start), np.bool_)
        uploads[r.call[rows & (r.call >= 0) & r.copy_kind.eq("HtoD")]] = True
        busy = np.zeros(len(c.start), np.bool_)
        busy[r.call[r.call >= 0]] = True
        busy |= c.sync
        none = -2 if g.first else -1  # -1: the window before's last call (a synchronisation)
        last = np.maximum.accumulate(np.where(busy, np.arange(len(c.start)), none))
        before = np.r_[none, last[:-1]]  # the last such call before each call
        at = np.flatnonzero(uploads & (before >= -1))
        marks = np.zeros(len(c.start) + 1, np.int64)  # the gaps from each one's call after `before` to it
        np.add.at(marks, before[at] + 1, 1)
        np.add.at(marks, at + 1, -1)
        made = np.where(np.cumsum(marks)[:-1] > 0, gaps.end - gaps.start, 0)
        host -= made
    elif what == "op" and arg:
        _ops(g, arg, 0.0, gaps, host, gpu, st)
    elif what == "host" and arg == "outside-ops":
        length = gaps.end - gaps.start
        outside = length - gaps.covered(g.ranges)
        # without the operators in the trace, a short gap between calls is their dispatch, not the program's own
        host -= outside if g.ops.enclose_launches else np.where(length >= LAUNCH_GAP_NS, outside, 0)
    else:
        raise UsageError(None, f"--remove {spec!r} is not a change traceconv knows", EXAMPLES)


def _scale(g: Graph, spec: str, gaps: _Gaps, one: Change, st: _Spec) -> None:
    host, call, gpu = one.host, one.call, one.gpu
    target, sep, factor_text = spec.rpartition("=")
    try:
        factor = float(factor_text)
    except ValueError:
        factor = -1.0
    if not sep or factor < 0:
        raise UsageError(None, f"--scale {spec!r} is not WHAT=FACTOR (a factor >= 0)", EXAMPLES)
    what, _, arg = target.partition(":")
    c, r = g.calls, g.gpu
    if what == "kernel" and arg:
        rows = r.kind.eq("kernel") & _matches(r.name, arg)
        gpu[rows] *= factor
    elif what == "op" and arg:
        _ops(g, arg, factor, gaps, host, gpu, st)
    elif what == "host" and not arg:
        host += np.rint((gaps.end - gaps.start) * (factor - 1.0)).astype(np.int64)
    elif what == "launch" and not arg:
        launches = ~c.sync & np.isin(np.arange(len(c.start)), r.call[r.call >= 0])
        own = c.end - c.start
        call[launches] += np.rint(own[launches] * (factor - 1.0)).astype(np.int64)
    else:
        raise UsageError(None, f"--scale {spec!r} is not a change traceconv knows", EXAMPLES)


def _ops(g: Graph, pattern: str, factor: float, gaps: _Gaps, host: I.I64, gpu: np.ndarray, st: _Spec) -> None:
    """The matching operators' host time (the host gaps they cover) and GPU work, times ``factor``."""
    rows = _matches(g.gpu.op, pattern)
    gpu[rows] *= factor
    if st.spans is None:  # the operators are the whole process's: their union is made once
        st.spans = g.op_ranges(pattern)
    covered = gaps.covered(st.spans)
    host += np.rint(covered * (factor - 1.0)).astype(np.int64)
    st.pattern = pattern
    st.hit = st.hit or bool(rows.any() or covered.any())


def _matches(names: Coded, pattern: str) -> I.Bools:
    try:
        return names.matches(pattern)
    except re.error as exc:
        raise UsageError(None, f"{pattern!r} is not a regular expression ({exc})", EXAMPLES) from exc
