"""Why each GPU ran out of work: its idle gaps, each by what happened when its last work ended.

The busy sweep (:mod:`traceconv.analyses.summary.timeline.busy`) sees, slice by slice of the time line, the
nested unions of a device's GPU rows (B), their queued spans (Q), the host's syncs (Y) and its
CUDA calls (A). A *gap* is a stretch of a scope's windows outside B; it belongs, whole, to what
was happening at its start, the moment the GPU finished its last work:

- ``queued``: launched work was waiting to start (B u Q covers the start): the GPU waited on a
  dependency of its own (an event, another stream or GPU);
- ``sync``: the host was blocked in a synchronisation (B u Q u Y covers it): it could not queue
  the next work while it waited, so the GPU ran dry; the gap lasts until the host, back from the
  sync, has launched the next work, and all of it is the sync's cost;
- otherwise the host was busy elsewhere and the GPU simply outran it: a gap shorter than
  ``launch_gap_ns`` is ``launch`` (operator dispatch and kernel launches: the host issues work
  more slowly than the GPU runs it), a longer one ``host`` (the host's own work: a data pipeline,
  Python between steps, CPU operators), split by whether the host was in a CUDA call
  (``host_api``) or not (``host_other``).

Unlike the idle time by cause of :mod:`traceconv.analyses.summary.verdict`, which names what the host does
at every idle instant, a gap is charged to its origin: the time after a sync returns, while the
host prepares the next work, is the sync's, because without the sync that work would have been
queued while the GPU was still busy. This is what removing a cause would win, at most: the
findings' savings (:mod:`traceconv.analyses.summary.findings`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa

from traceconv.analyses import intervals as I
from traceconv.analyses.prepare import NO_OP
from traceconv.analyses.results import HostActivity, IdleGaps, OpTally
from traceconv.analyses.source import Source

Segments = tuple[I.I64, I.I64]
# Where a gap's start lies: the first of the nested unions (B u Q, B u Q u Y, ... u A) that covers it.
QUEUED, SYNC, API, HOST = 1, 2, 3, 4
KINDS = ("queued", "sync", "launch", "host_api", "host_other")
FAR = np.iinfo(np.int64).max // 4  # the edge of an unbounded slice
TOP_ACTIVITY = 5  # operators (and host ranges) named behind a cause
SAMPLED_GAPS = 256  # the long gaps read for what the host did in them (the longest)
NESTED = 1.02  # an operator that overlaps the gaps this nearly as much as the one before it is taken to be inside it


@dataclass
class GapCosts:
    """One device's (or the devices') gaps inside one scope's windows, by cause, in ns; ``sync_at``
    and ``sync_ns``: each sync gap's start and time (to tell staging from result waits once the
    syncs are classified); ``long_gaps``: the host gaps' intervals, for what the host did in them."""

    queued: int = 0
    sync: int = 0
    launch: int = 0
    host_api: int = 0
    host_other: int = 0
    sync_at: list[I.I64] = field(default_factory=list)  # arrays, a batch of gaps each
    sync_ns: list[I.I64] = field(default_factory=list)
    long_at: list[I.I64] = field(default_factory=list)
    long_end: list[I.I64] = field(default_factory=list)

    @property
    def host(self) -> int:
        return self.host_api + self.host_other

    def add(self, other: GapCosts) -> None:
        for k in KINDS:
            setattr(self, k, getattr(self, k) + getattr(other, k))
        self.sync_at += other.sync_at
        self.sync_ns += other.sync_ns
        self.long_at += other.long_at
        self.long_end += other.long_end


@dataclass(frozen=True)
class HostRanges:
    """The host's operators and annotations that ended, steps aside (what it did in the long gaps): SQL of
    their ``kind`` and ``label`` codes, ``start_ns`` and ``end_ns``, and the names the codes stand for."""

    sql: str
    kinds: Sequence[str]
    labels: Sequence[str]  # label code -> grouped name (-1: none)


class GapTally:
    """The gaps of one device, fed a slice of the time line at a time (:meth:`slice`), tallied
    per scope; a gap that runs on past the end of a slice is carried into the next."""

    def __init__(self, windows: Sequence[Segments], launch_gap_ns: int, per_window: Sequence[bool] = ()) -> None:
        self.windows = windows
        self.launch_gap_ns = launch_gap_ns
        self.costs = [GapCosts() for _ in windows]
        # per scope that asks for it: each window's gap time by kind (a row per window)
        self.per_window = [
            np.zeros((len(w[0]), len(KINDS)), np.int64) if k < len(per_window) and per_window[k] else None
            for k, w in enumerate(windows)
        ]
        self.pending: tuple[int, int, int] | None = None  # (start, end so far, cause) of a gap still open

    def slice(self, lo: int | None, hi: int | None, levels: Sequence[Segments]) -> None:
        """A slice ``[lo, hi)`` (None: unbounded) with each nested union's segments inside it."""
        lo_t = -FAR if lo is None else lo
        hi_t = FAR if hi is None else hi
        bs, be = levels[0]
        if len(be) and be[0] < lo_t:  # a segment that closed in an earlier slice, still open in the union
            keep = be >= lo_t
            bs, be = bs[keep], be[keep]
        starts = np.r_[lo_t, be]  # the gaps: from each busy segment's end to the next one's start
        ends = np.r_[bs, hi_t]
        real = ends > starts
        starts, ends = starts[real], ends[real]
        if not len(starts):
            self._close()
            return
        causes = _causes(starts, levels[1:])
        if self.pending is not None and starts[0] == lo_t:  # the gap open at the last slice's end goes on
            start, _, cause = self.pending
            starts[0], causes[0] = start, cause
        elif self.pending is not None:
            self._close()
        self.pending = None
        if ends[-1] == hi_t and hi is not None:  # open at the slice's end: carried
            self.pending = (int(starts[-1]), int(ends[-1]), int(causes[-1]))
            starts, ends, causes = starts[:-1], ends[:-1], causes[:-1]
        self._tally(starts, ends, causes)

    def finish(self) -> list[GapCosts]:
        self._close()
        return self.costs

    def _close(self) -> None:
        if self.pending is not None:
            s, e, c = self.pending
            self.pending = None
            self._tally(np.array([s], np.int64), np.array([e], np.int64), np.array([c], np.int64))

    def _tally(self, starts: I.I64, ends: I.I64, causes: I.I64) -> None:
        long = (ends - starts) >= self.launch_gap_ns
        kind = np.select(
            [causes == QUEUED, causes == SYNC, ~long, causes == API], [0, 1, 2, 3], default=4
        )  # an index into KINDS
        for k, (ws, we) in enumerate(self.windows):
            if not len(ws):
                continue
            inside = I.covered_below(ws, we, ends) - I.covered_below(ws, we, starts)
            costs = self.costs[k]
            sums = np.bincount(kind, weights=inside, minlength=len(KINDS)).astype(np.int64)
            for name, ns in zip(KINDS, sums, strict=True):
                setattr(costs, name, getattr(costs, name) + int(ns))
            synced = np.flatnonzero((kind == 1) & (inside > 0))
            if len(synced):
                costs.sync_at.append(starts[synced])
                costs.sync_ns.append(inside[synced])
            mine = self.per_window[k]
            if mine is not None:
                _per_window(starts, ends, kind, ws, we, mine)
            hosted = np.flatnonzero((kind >= 3) & (inside > 0))
            a, b = np.maximum(starts[hosted], ws[0]), np.minimum(ends[hosted], we[-1])  # within the windows
            if len(hosted):
                costs.long_at.append(a)
                costs.long_end.append(b)


def _per_window(starts: I.I64, ends: I.I64, kind: I.I64, ws: I.I64, we: I.I64, into: np.ndarray) -> None:
    """Adds each gap's time (sorted, disjoint ``[starts, ends)``) inside each window to its kind's column."""
    lo, hi = int(np.searchsorted(we, starts[0], "right")), int(np.searchsorted(ws, ends[-1], "left"))
    if lo >= hi:
        return
    edges = np.concatenate([we[lo:hi], ws[lo:hi]])
    for k in np.unique(kind):
        mine = kind == k
        below = I.covered_below(starts[mine], ends[mine], edges)
        into[lo:hi, k] += below[: hi - lo] - below[hi - lo :]


def _causes(points: I.I64, levels: Sequence[Segments]) -> I.I64:
    """For each point, the first of the nested unions ``levels`` (B u Q, then wider) that covers it
    (``s <= t < e``), numbered from 1; one past the last where none does. Each wider union is searched
    only for the points the narrower ones left uncovered (most gaps of a busy GPU begin queued)."""
    out = np.full(len(points), len(levels) + 1, np.int64)
    todo = np.arange(len(points))
    for n, (s, e) in enumerate(levels):
        if not len(todo):
            break
        if not len(s):
            continue
        t = points[todo]
        at = np.searchsorted(s, t, side="right") - 1
        covered = (at >= 0) & (t < e[np.maximum(at, 0)])
        out[todo[covered]] = n + 1
        todo = todo[~covered]
    return out


def total(per_device: Sequence[GapCosts]) -> GapCosts:
    """The devices' gaps together."""
    out = GapCosts()
    for g in per_device:
        out.add(g)
    return out


# -- what the gaps' causes were: the syncs they followed, what the host did in the long ones -----
def idle_gaps(source: Source, costs: GapCosts, ranges: HostRanges, top: int = TOP_ACTIVITY) -> IdleGaps:
    """The gaps of a scope with their syncs classified (``sync_calls`` must exist: staging or result
    wait, and the operators behind them) and the host's ``ranges`` during the long gaps."""
    waits, staged, result_ops, staging_ops = _sync_gaps(source, costs)
    activity, outside = _host_activity(source, ranges, _joined(costs.long_at), _joined(costs.long_end), top)
    host = costs.host
    return IdleGaps(
        queued_ns=costs.queued,
        result_wait_ns=waits,
        staging_ns=staged,
        launch_ns=costs.launch,
        host_ns=host,
        host_api_ns=costs.host_api,
        host_outside_ops_ns=round(host * outside),
        result_wait_ops=result_ops,
        staging_ops=staging_ops,
        host_activity=activity,
    )


def totals(costs: GapCosts) -> IdleGaps:
    """The gaps of a scope by cause, unclassified: the syncs' gaps all result waits, no operators named,
    no host activity read (a scope whose totals are all that is read of them: its verdict)."""
    return IdleGaps(
        queued_ns=costs.queued,
        result_wait_ns=costs.sync,
        staging_ns=0,
        launch_ns=costs.launch,
        host_ns=costs.host,
        host_api_ns=costs.host_api,
        host_outside_ops_ns=0,
        result_wait_ops=[],
        staging_ops=[],
        host_activity=[],
    )


def _sync_gaps(source: Source, costs: GapCosts) -> tuple[int, int, list[OpTally], list[OpTally]]:
    if not costs.sync_at or not sum(len(a) for a in costs.sync_at):
        return 0, 0, [], []
    source.register("sync_gaps", pa.table({"a": _joined(costs.sync_at), "ns": _joined(costs.sync_ns)}))
    rows = source.frame(
        "SELECT coalesce(s.staging, false) AS staging, coalesce(l.label, ?) AS op, coalesce(r.region, '') AS region, "
        "count(*) AS n, isum(g.ns) AS ns FROM sync_gaps g "
        "ASOF LEFT JOIN (SELECT trace_id, event_id, start_ns, op_name, staging, activity FROM sync_calls "
        "WHERE start_ns IS NOT NULL UNION ALL SELECT trace_id, event_id, start_ns, op_name, staging, false "
        "FROM copy_waits) s ON g.a >= s.start_ns "
        "LEFT JOIN labels l ON l.name = s.op_name "
        "LEFT JOIN regions r ON r.trace_id = s.trace_id AND r.event_id = s.event_id AND NOT s.activity "
        "GROUP BY ALL ORDER BY ns DESC, op",
        [NO_OP],
    )
    staged = rows["staging"].to_numpy(bool)

    def ops(part: pd.DataFrame) -> list[OpTally]:
        return [
            OpTally(str(r.op), str(r.region) if r.region and r.region != r.op else None, int(r.n), int(r.ns))
            for r in part.head(TOP_ACTIVITY).itertuples()
        ]

    return int(rows["ns"][~staged].sum()), int(rows["ns"][staged].sum()), ops(rows[~staged]), ops(rows[staged])


def _joined(parts: list[I.I64]) -> I.I64:
    return np.concatenate(parts) if parts else np.empty(0, np.int64)


def _host_activity(
    source: Source, host: HostRanges, starts: I.I64, ends: I.I64, top: int
) -> tuple[list[HostActivity], float]:
    """The operators and annotations (steps aside) that overlap the long gaps (most overlap first), and
    the share of the gaps' time outside all of them. Read on the :data:`SAMPLED_GAPS` longest gaps,
    which hold most of the time (a trace of thousands of steps has tens of thousands): the overlaps
    scaled to all of them."""
    if not len(starts):
        return [], 1.0
    s, e = I.union(starts, ends)
    total_ns = int((e - s).sum())
    longest = np.sort(np.argsort(e - s, kind="stable")[::-1][:SAMPLED_GAPS])
    s, e = s[longest], e[longest]
    sampled = int((e - s).sum())
    rows = (
        f"SELECT kind, label, start_ns, end_ns FROM ({host.sql}) WHERE start_ns < {int(e[-1])} AND end_ns > {int(s[0])}"
    )
    parts = [_overlaps(batch, s, e) for batch in source.batches(rows)]
    kind, label, ps, pe = (np.concatenate([np.empty(0, np.int64)] + [p[i] for p in parts]) for i in range(4))
    inside = I.length(ps, pe)
    ranked = _ranked(host, kind, label, pe - ps)[: 2 * int(top)]
    scale = total_ns / sampled if sampled else 1.0
    activity: list[HostActivity] = []
    for kind_name, name, ns in ranked:
        last = activity[-1] if activity else None
        if last is not None and last.kind == kind_name == "cpu_op" and ns * scale * NESTED >= last.overlap_ns:
            continue  # an operator inside the one before it (aten::rand -> aten::uniform_): named once
        activity.append(HostActivity(str(name), kind_name, round(ns * scale)))
    return activity[:top], (1.0 - inside / sampled) if sampled else 1.0


def _overlaps(batch: pa.RecordBatch, s: I.I64, e: I.I64) -> tuple[I.I64, I.I64, I.I64, I.I64]:
    """Each range of ``batch`` clipped to each gap it overlaps (kind, label, start, end of each piece). The
    gaps are sorted and disjoint: a range overlaps those from the first to end after it starts to the
    last to start before it ends (a search of the few gaps, not a join of the ranges on them)."""
    start = batch.column("start_ns").to_numpy().astype(np.int64)
    end = batch.column("end_ns").to_numpy().astype(np.int64)
    first = np.searchsorted(e, start, side="right")
    n = np.maximum(np.searchsorted(s, end, side="left") - first, 0)
    gap = np.repeat(first, n) + (np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n))
    kind = np.repeat(batch.column("kind").to_numpy().astype(np.int64), n)
    label = np.repeat(batch.column("label").to_numpy().astype(np.int64), n)
    return kind, label, np.maximum(np.repeat(start, n), s[gap]), np.minimum(np.repeat(end, n), e[gap])


def _ranked(host: HostRanges, kind: I.I64, label: I.I64, ns: I.I64) -> list[tuple[str, str | None, int]]:
    """The overlap per kind and name, most first (then by name; no name last)."""
    width = len(host.labels) + 1
    keys, at = np.unique(kind * width + label + 1, return_inverse=True)
    sums = np.zeros(len(keys), np.int64)
    np.add.at(sums, at, ns)
    rows = [
        (host.kinds[int(k) // width], host.labels[int(k) % width - 1] if k % width else None, int(v))
        for k, v in zip(keys, sums, strict=True)
    ]
    return sorted(rows, key=lambda r: (-r[2], r[1] is None, r[1] or ""))
