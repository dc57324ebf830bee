"""Several ranks replayed together, coupled through their matched collectives.

Each rank's process has its own graph (:mod:`.graph`) and replay (:mod:`.replay`). A collective
matched across the ranks (:mod:`traceconv.analyses.ranks.match`: same process group, name and
position in the group's sequence) couples them: each rank *arrives* when its stream reaches the
collective's kernel (the kernel's replayed start), and the transfer begins only when the last
rank has arrived, so every rank's kernel ends at ``max(own arrival, last arrival) + transfer``.
The transfer's time is the last arriver's kernel in the trace (it did not wait), times the
change's factor for that collective (the largest of the ranks': a collective moves at its slowest
member's pace; a collective removed on every rank waits for nobody). Arrivals are compared on one
clock (the ranks analysis' offsets, from the collectives' ends).

The ranks are replayed in rounds until no arrival moves (a fixed point), each round every rank
replayed on its own with the last arrivals of the round before. This keeps the single-rank
replay as it is (vectorised segment by segment, rather than an event-by-event simulation in a
global order), and it converges: every rank runs the collectives of a group in the same order and
an arrival depends only on what came before it, so each round settles at least the next
collective of the chain; in practice a change settles in two or three rounds. Unchanged, the
arrivals are the trace's own, and the first round is the fixed point.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from traceconv.analyses import intervals as I
from traceconv.analyses.prepare import Facts
from traceconv.analyses.ranks import calls as C
from traceconv.analyses.ranks import match as M
from traceconv.analyses.ranks import units as U
from traceconv.analyses.source import Source
from traceconv.analyses.whatif.graph import NONE, Graph
from traceconv.analyses.whatif.model import Model, classify, model
from traceconv.analyses.whatif.replay import Change, Floors, Timeline, replay
from traceconv.errors import UsageError

MAX_ROUNDS = 64  # each round settles at least one more collective of the chain


@dataclass(frozen=True)
class Rank:
    """One rank's process: who it is, its model, and its clock's offset from the reference rank's."""

    label: str
    rank: int | None
    model: Model
    offset: int  # ns to add to its times to put them on the reference rank's clock


@dataclass(frozen=True)
class Coupling:
    """The matched collectives, one entry per (instance, member rank): the instance, the rank (an
    index into the ranks) and the GPU row of its kernel in that rank's graph."""

    instance: I.I64
    who: I.I64
    row: I.I64
    count: int  # instances
    unmatched: int  # communication kernels with no counterpart on every rank of their group

    def rows_of(self, k: int) -> I.Bools:
        return np.asarray(self.who == k, dtype=np.bool_)


@dataclass(frozen=True)
class Replayed:
    """The ranks' timelines at the fixed point, and the rounds it took (``settled``: it was reached)."""

    timelines: list[Timeline]
    rounds: int
    settled: bool


def ranks(source: Source, facts: Facts, step_pattern: str) -> tuple[list[Rank], Coupling]:
    """Every rank's process with its steps' model, and the collectives that couple them."""
    found = U.units(source)
    classify(source)
    processes: dict[tuple[str | None, int | None], list[int]] = {}
    for i, u in enumerate(found):
        processes.setdefault((u.trace_id, u.pid), []).append(i)
    calls = [C.calls(source, u) for u in found]
    groups = M.groups(calls)
    offsets = M.offsets(calls, groups, 0)
    out: list[Rank] = []
    of_unit: dict[int, int] = {}
    for members in processes.values():
        u = found[members[0]]
        steps = U.unit_steps(source, u, step_pattern)
        label = "+".join(found[i].label for i in members)
        if steps is None:
            raise UsageError(
                None,
                f"rank {label} marks no steps: a what-if across ranks replays every rank's steps",
                "mark steps on every rank, or name them with --steps REGEX",
            )
        m = model(source, step_pattern, dataclasses.replace(facts, steps=steps), classified=True)
        for i in members:
            of_unit[i] = len(out)
        out.append(Rank(label, u.rank, m, offsets.get(members[0]) or 0))
    return out, _coupling(found, calls, groups, out, of_unit)


def _coupling(
    found: list[U.Unit], calls: list[C.Calls], groups: list[M.Group], out: list[Rank], of_unit: dict[int, int]
) -> Coupling:
    inst, who, row = [], [], []
    count = 0
    for g in groups:
        for members in g.complete(calls).values():
            rows = {m: _row(out[of_unit[m]].model.graph, found[m], calls[m], i) for m, i in members.items()}
            if any(r < 0 for r in rows.values()) or len({of_unit[m] for m in rows}) < 2:
                continue
            for m, r in rows.items():
                inst.append(count)
                who.append(of_unit[m])
                row.append(r)
            count += 1
    total = sum(len(c.rows) for c in calls)
    return Coupling(_ints(inst), _ints(who), _ints(row), count, total - len(row))


def _row(g: Graph, unit: U.Unit, c: C.Calls, i: int) -> int:
    """The GPU row of the graph that is the rank's ``i``-th communication kernel (-1: none)."""
    s, e = int(c.rows["start_ns"].iloc[i]), int(c.rows["end_ns"].iloc[i])
    lo, hi = np.searchsorted(g.gpu.start, [s, s + 1])
    for k in range(int(lo), int(hi)):
        if int(g.gpu.end[k]) == e and (unit.device is None or int(g.gpu.device[k]) in (unit.device, -1)):
            return k
    return -1


def replay_all(rs: Sequence[Rank], cp: Coupling, changes: Sequence[Change]) -> Replayed:
    """Every rank replayed with its change, coupled through the collectives, to the fixed point."""
    offset = np.array([r.offset for r in rs], np.int64)[cp.who]
    start = np.array([rs[k].model.graph.gpu.start[j] for k, j in zip(cp.who, cp.row, strict=True)], np.int64)
    end = np.array([rs[k].model.graph.gpu.end[j] for k, j in zip(cp.who, cp.row, strict=True)], np.int64)
    transfer, coupled = _transfer(rs, cp, changes, start + offset, end - start)
    arrival = start + offset
    timelines: list[Timeline] = []
    for rounds in range(1, MAX_ROUNDS + 1):
        last = np.full(cp.count, NONE, np.int64)
        np.maximum.at(last, cp.instance, arrival)
        release = np.where(coupled[cp.instance], last[cp.instance] - offset, NONE)
        timelines = []
        for k, r in enumerate(rs):
            mine = cp.rows_of(k)
            floors = Floors(cp.row[mine], release[mine], transfer[cp.instance[mine]])
            timelines.append(replay(r.model.graph, r.model.prepared, changes[k], floors))
        now = np.array([timelines[k].gpu_start[j] for k, j in zip(cp.who, cp.row, strict=True)], np.int64) + offset
        if np.array_equal(now, arrival):
            return Replayed(timelines, rounds, True)
        arrival = now
    return Replayed(timelines, MAX_ROUNDS, False)


def _transfer(
    rs: Sequence[Rank], cp: Coupling, changes: Sequence[Change], arrival: I.I64, dur: I.I64
) -> tuple[I.I64, I.Bools]:
    """Per instance: the transfer's time (the last arriver's kernel in the trace, times the largest of
    the ranks' factors for it), and whether it still couples the ranks (not removed on every rank)."""
    key = np.lexsort((cp.who, -arrival, cp.instance))  # per instance, the latest arrival first (ties: lowest rank)
    first = np.r_[True, cp.instance[key][1:] != cp.instance[key][:-1]]
    base = np.zeros(cp.count, np.int64)
    base[cp.instance[key][first]] = dur[key][first]
    factor = np.array([changes[k].gpu[j] for k, j in zip(cp.who, cp.row, strict=True)], np.float64)
    most = np.zeros(cp.count, np.float64)
    np.maximum.at(most, cp.instance, factor)
    return np.rint(base * most).astype(np.int64), most > 0


def _ints(values: list[int]) -> I.I64:
    return np.asarray(values, dtype=np.int64)
