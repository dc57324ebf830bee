"""Two multi-rank runs rank by rank (``traceconv diff``): each rank's figures before and after.

Ranks pair by their rank number when both runs give every rank one, else by their order
(ranks sorted as ``traceconv ranks`` lists them), which the note says. Figures are per step
when both ranks mark steps (over the steps, divided by their count), else over the windows.
"""

from __future__ import annotations

from dataclasses import dataclass

from traceconv.analyses.ranks.model import RankRow, RanksReport
from traceconv.analyses.ranks.verdicts import scoped

MEASURES = ("compute_ns", "comm_ns", "exposed_comm_ns", "copy_ns", "idle_ns")


@dataclass(frozen=True)
class RankFigures:
    """One rank in one run: per step (``per`` = "step") or over its window (``per`` = "window")."""

    step_ns: int | None
    compute_ns: int
    comm_ns: int
    exposed_comm_ns: int
    copy_ns: int
    idle_ns: int
    overlap_pct: float | None
    wait_ns: int


@dataclass(frozen=True)
class RankChange:
    label: str  # the after run's label (``0``, or ``trace:pid``); ``before_label`` when they differ
    before_label: str
    per: str
    before: RankFigures
    after: RankFigures
    delta: dict[str, int]  # after minus before, for MEASURES and step_ns where both have it


def compare(before: RanksReport, after: RanksReport) -> tuple[list[RankChange], list[str]]:
    """The ranks of both runs paired (see the module), and what a reader should know about the pairing."""
    notes = []
    numbered = all(r.rank is not None for r in [*before.ranks, *after.ranks])
    if numbered:
        b = {r.rank: r for r in before.ranks}
        pairs = [(b[r.rank], r) for r in after.ranks if r.rank in b]
        left = len(before.ranks) + len(after.ranks) - 2 * len(pairs)
    else:
        pairs = list(zip(before.ranks, after.ranks, strict=False))
        left = abs(len(before.ranks) - len(after.ranks))
        notes.append("the ranks have no rank numbers: paired in the order `traceconv ranks` lists them")
    if left:
        notes.append(f"{left} rank(s) are in one run only: not compared")
    return [_change(x, y) for x, y in pairs], notes


def _change(b: RankRow, a: RankRow) -> RankChange:
    steps = b.in_steps is not None and a.in_steps is not None and b.steps > 0 and a.steps > 0
    x, y = _figures(b, steps), _figures(a, steps)
    delta = {m: getattr(y, m) - getattr(x, m) for m in MEASURES}
    if x.step_ns is not None and y.step_ns is not None:
        delta["step_ns"] = y.step_ns - x.step_ns
    return RankChange(a.label, b.label, "step" if steps else "window", x, y, delta)


def _figures(r: RankRow, steps: bool) -> RankFigures:
    p, n = scoped(r, steps), (r.steps if steps else 1)
    return RankFigures(
        step_ns=r.step_ns,
        compute_ns=round(p.compute_ns / n),
        comm_ns=round(p.comm_ns / n),
        exposed_comm_ns=round(p.exposed_comm_ns / n),
        copy_ns=round(p.copy_ns / n),
        idle_ns=round(p.idle_ns / n),
        overlap_pct=p.overlap_pct,
        wait_ns=r.wait_ns,
    )
