"""``whatif`` on several ranks: every rank replayed with the change, coupled through the collectives
(:mod:`.coupled`); each rank's step before and predicted, and the job's step, the slowest rank's.

As on one rank, the prediction is each rank's measured step moved by what the change does in the
replay (the coupled replay's own error, unchanged against measured, cancels).
"""

from __future__ import annotations

from collections.abc import Sequence

from traceconv.analyses.prepare import Facts
from traceconv.analyses.source import Source
from traceconv.analyses.whatif import changes as CH
from traceconv.analyses.whatif.coupled import Coupling, Rank, Replayed, ranks, replay_all
from traceconv.analyses.whatif.model import critical_path, measure
from traceconv.analyses.whatif.replay import Change, Timeline
from traceconv.analyses.whatif.result import RankStep, WhatIf
from traceconv.errors import UsageError


def whatif_ranks(
    source: Source, facts: Facts, removes: list[str], scales: list[str], step_pattern: str, rank: str | None
) -> WhatIf:
    """The job's step (its slowest rank's) and each rank's, before and predicted after the changes,
    applied on every rank or on ``rank`` (a rank's number or label) alone."""
    rs, cp = ranks(source, facts, step_pattern)
    chosen = _chosen(rs, rank)
    parsed = [CH.parse(r.model.graph, removes, scales) if k in chosen else None for k, r in enumerate(rs)]
    changes = [p[0] if p is not None else Change.none(r.model.graph) for p, r in zip(parsed, rs, strict=True)]
    base = replay_all(rs, cp, [Change.none(r.model.graph) for r in rs])
    after = replay_all(rs, cp, changes)
    made = [_step(r, k in chosen, base.timelines[k], after.timelines[k]) for k, r in enumerate(rs)]
    steps = [s for s, _ in made]
    slow = max(range(len(rs)), key=lambda k: (steps[k].step_ns, -k))
    slow_after = max(range(len(rs)), key=lambda k: (steps[k].predicted_step_ns, -k))
    measured, predicted = steps[slow].step_ns, steps[slow_after].predicted_step_ns
    m, m_after = rs[slow].model, rs[slow_after].model
    return WhatIf(
        source=facts.source,
        steps=steps[slow].steps,
        step_ns=measured,
        predicted_step_ns=predicted,
        saving_ns=measured - predicted,
        saving_pct=round((measured - predicted) * 100.0 / measured, 1) if measured else 0.0,
        critical_path=critical_path(measure(m, base.timelines[slow])),
        predicted_critical_path=critical_path(measure(m_after, after.timelines[slow_after])),
        changed=_matched([p[1] for p in parsed if p is not None]),
        notes=_notes(rs, cp, made, base, after),
        ranks=steps,
        slowest_rank=rs[slow].label,
        predicted_slowest_rank=rs[slow_after].label,
    )


def _chosen(rs: Sequence[Rank], rank: str | None) -> set[int]:
    if rank is None:
        return set(range(len(rs)))
    hit = {k for k, r in enumerate(rs) if rank in (r.label, str(r.rank))}
    if not hit:
        raise UsageError(
            None, f"--rank {rank}: no such rank in the input", f"choose from {', '.join(r.label for r in rs)}"
        )
    return hit


def _step(r: Rank, changed: bool, base: Timeline, after: Timeline) -> tuple[RankStep, int]:
    """The rank's step measured and predicted, and as the unchanged replay gives it."""
    m = r.model
    replayed = measure(m, base, spans=False).pace
    moved = measure(m, after, spans=False).pace
    assert m.facts.steps is not None
    count, measured = m.facts.steps.count, m.measured_ns
    return RankStep(r.rank, r.label, count, measured, measured + moved - replayed, changed, replayed), replayed


def _matched(per_rank: list[list[CH.Matched]]) -> list[CH.Matched]:
    """What each change matched, per step, added up over the ranks it applies to; a note kept when
    every such rank has it."""
    out = []
    for same in zip(*per_rank, strict=True):
        notes = [n for n in same[0].notes if all(n in m.notes for m in same)]
        out.append(
            CH.Matched(
                same[0].what,
                round(sum(m.calls for m in same), 1),
                round(sum(m.gpu_rows for m in same), 1),
                sum(m.host_ns for m in same),
                sum(m.gpu_ns for m in same),
                notes,
            )
        )
    return out


def _notes(
    rs: Sequence[Rank], cp: Coupling, made: list[tuple[RankStep, int]], base: Replayed, after: Replayed
) -> list[str]:
    out = [f"{len(rs)} ranks replayed together, coupled through {cp.count} matched collective(s)"]
    if cp.unmatched:
        out.append(
            f"{cp.unmatched} communication kernel(s) have no counterpart on every rank of their group: "
            "they keep their time as they ran"
        )
    for t in (base, after):
        if not t.settled:
            out.append(f"the ranks' replay did not settle in {t.rounds} rounds: its arrivals are the last round's")
    for s, replayed in made:
        if replayed != s.step_ns:
            out.append(
                f"rank {s.label}: the unchanged replay gives {replayed:,} ns a step against {s.step_ns:,} measured"
            )
    return out
