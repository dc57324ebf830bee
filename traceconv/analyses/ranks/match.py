"""Collectives matched across ranks, and the ranks' clock offsets from them.

Within a process group every rank runs the same collectives in the same order, so the n-th
collective of one rank is the n-th of the others, counted from a common start. Traces rarely
write that sequence number, and ranks' windows start at different collectives (rank 0 profiled
one more all-reduce than rank 1), so each rank's sequence is aligned to the group's reference
(the rank with the most collectives) by the shift under which every pair agrees on collective
name, size and dtype, and the ends of the paired kernels (which finish together: a collective
completes for all ranks at once) differ by the steadiest amount. A rank with no such shift, or
with two that fit about as well, is not matched: its collectives are counted, never guessed.
The offset of a rank is the median difference of its matched ends from the reference's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from traceconv.analyses.ranks.calls import Calls

MIN_PAIRS = 3  # pairs a shift needs (fewer when a rank has fewer collectives)
AMBIGUOUS = 2.0  # a second shift whose spread is within this factor of the best (plus SLACK_NS) ...
SLACK_NS = 20_000  # ... makes the alignment ambiguous


@dataclass
class Group:
    """One process group: its ranks (indexes into the input's calls) and each one's shift."""

    name: str
    members: list[int]
    reference: int
    shifts: dict[int, int] = field(default_factory=dict)  # member -> shift to the reference's numbering
    unaligned: list[int] = field(default_factory=list)

    def instances(self, calls: Sequence[Calls]) -> dict[int, dict[int, int]]:
        """seq -> {member: row} for every collective of the aligned members."""
        out: dict[int, dict[int, int]] = {}
        for m, d in self.shifts.items():
            rows = np.flatnonzero((calls[m].rows["pg"] == self.name).to_numpy())
            for ordinal, i in enumerate(rows.tolist()):
                out.setdefault(ordinal + d, {})[m] = int(i)
        return out

    def complete(self, calls: Sequence[Calls]) -> dict[int, dict[int, int]]:
        need = len(self.shifts)
        return {k: v for k, v in sorted(self.instances(calls).items()) if len(v) == need and need > 1}


def groups(calls: Sequence[Calls]) -> list[Group]:
    """The process groups with their members aligned to the reference."""
    names = sorted({str(g) for c in calls for g in c.rows["pg"]})
    out = []
    for name in names:
        members = [i for i, c in enumerate(calls) if (c.rows["pg"] == name).any()]
        counts = [int((calls[i].rows["pg"] == name).sum()) for i in members]
        reference = members[int(np.argmax(counts))]
        group = Group(name, members, reference, shifts={reference: 0})
        ref = _sequence(calls[reference], name)
        for m in members:
            if m == reference:
                continue
            d = shift(ref, _sequence(calls[m], name))
            if d is None:
                group.unaligned.append(m)
            else:
                group.shifts[m] = d
        out.append(group)
    return out


@dataclass(frozen=True)
class Seq:
    names: np.ndarray
    nelems: np.ndarray  # -1: unknown
    dtypes: np.ndarray
    end_ns: np.ndarray


def _sequence(c: Calls, group: str) -> Seq:
    rows = c.rows[c.rows["pg"] == group]
    return Seq(
        names=rows["collective"].astype(str).to_numpy(),
        nelems=rows["in_nelems"].fillna(-1).to_numpy(dtype=np.int64),
        dtypes=rows["dtype"].fillna("").astype(str).to_numpy(),
        end_ns=rows["end_ns"].to_numpy(dtype=np.int64),
    )


def shift(ref: Seq, other: Seq) -> int | None:
    """The shift d pairing ``other``'s i-th collective with ``ref``'s (i + d)-th, or None (see the module)."""
    n_r, n_o = len(ref.names), len(other.names)
    need = min(MIN_PAIRS, n_r, n_o)
    found: list[tuple[float, int, int]] = []  # spread, -pairs, shift
    for d in range(-(n_o - 1), n_r):
        lo, hi = max(0, -d), min(n_o, n_r - d)
        if hi - lo < max(need, 1):
            continue
        i = np.arange(lo, hi)
        j = i + d
        if not _agree(ref, other, j, i):
            continue
        diffs = ref.end_ns[j] - other.end_ns[i]
        found.append((float(np.std(diffs)), -(hi - lo), d))
    if not found:
        return None
    found.sort()
    best = found[0]
    if len(found) > 1 and found[1][0] <= AMBIGUOUS * best[0] + SLACK_NS and found[1][1] <= best[1]:
        return None
    return best[2]


def _agree(ref: Seq, other: Seq, j: np.ndarray, i: np.ndarray) -> bool:
    names = ref.names[j] == other.names[i]
    a, b = ref.nelems[j], other.nelems[i]
    sizes = (a == b) | (a < 0) | (b < 0)
    x, y = ref.dtypes[j], other.dtypes[i]
    dtypes = (x == y) | (x == "") | (y == "")
    return bool((names & sizes & dtypes).all())


def offsets(calls: Sequence[Calls], found: Sequence[Group], reference: int) -> dict[int, int | None]:
    """Per rank, the time to add to its clock to put it on ``reference``'s (None: no shared collective)."""
    known: dict[int, int | None] = {i: None for i in range(len(calls))}
    known[reference] = 0
    for _ in range(len(found) + 1):  # groups chain: a rank reached through another group's reference
        for g in found:
            anchors = [m for m in g.shifts if known[m] is not None]
            if not anchors:
                continue
            a = anchors[0]
            for m in g.shifts:
                if known[m] is None:
                    diffs = _end_diffs(calls, g, a, m)
                    if len(diffs):
                        base = known[a] or 0
                        known[m] = base + round(float(np.median(diffs)))
    return known


def _end_diffs(calls: Sequence[Calls], g: Group, a: int, m: int) -> np.ndarray:
    pairs = [(v[a], v[m]) for v in g.complete(calls).values()]
    if not pairs:
        return np.empty(0, np.int64)
    ea = calls[a].rows["end_ns"].to_numpy(dtype=np.int64)
    em = calls[m].rows["end_ns"].to_numpy(dtype=np.int64)
    ia, im = (np.array(p, dtype=np.int64) for p in zip(*pairs, strict=True))
    diffs: np.ndarray = ea[ia] - em[im]
    return diffs
