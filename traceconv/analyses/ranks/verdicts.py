"""Stragglers and the multi-rank findings: STRAGGLER, LOW_OVERLAP, COMM_BOUND.

Figures are taken over the steps when every rank marks them (warm-up and set-up would blur
them), else over each rank's window. A straggler is a rank whose compute time (per step) is over
the ranks' median by the STRAGGLER threshold: the others wait for it in the next collective, which
its last arrivals and the others' waiting time in the matched collectives show. A rank that
arrives last at most collectives, the others waiting for it a share of the step over the same
threshold, is one too (basis ``arrival``): its host is late even where its GPU work is not.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from traceconv.analyses.finding import Finding, make, ordered
from traceconv.analyses.ranks.across import Across
from traceconv.analyses.ranks.model import Breakdown, RankRow, Straggler
from traceconv.analyses.thresholds import Thresholds
from traceconv.units import ms


def scoped(r: RankRow, steps: bool) -> Breakdown:
    """The rank's figures over its steps (``steps``) or its whole window."""
    if steps and r.in_steps is not None:
        return r.in_steps
    return Breakdown(
        r.window_ns, r.compute_ns, r.comm_ns, r.copy_ns, r.idle_ns, r.overlap_ns, r.overlap_pct, r.exposed_comm_ns
    )


def on_steps(rows: Sequence[RankRow]) -> bool:
    return bool(rows) and all(r.in_steps is not None and r.steps for r in rows)


def stragglers(rows: Sequence[RankRow], crossed: Across, t: Thresholds) -> list[Straggler]:
    """The ranks over the median compute time by the threshold, then the ranks the others wait for
    (see :func:`_late`), most over first."""
    if len(rows) < 2:
        return []
    steps = on_steps(rows)
    times = np.array([scoped(r, steps).compute_ns / (r.steps if steps else 1) for r in rows], dtype=float)
    median = float(np.median(times))
    out = []
    for i, (r, v) in enumerate(zip(rows, times, strict=True)):
        over = (v - median) * 100.0 / median if median else 0.0
        if over >= t.STRAGGLER:
            out.append(_straggler_of(r, crossed, i, "compute per step" if steps else "compute", v, median, over))
    flagged = {s.label for s in out}
    out += [s for s in _late(rows, crossed, steps, t) if s.label not in flagged]
    return sorted(out, key=lambda s: -s.over_pct)


def _late(rows: Sequence[RankRow], crossed: Across, steps: bool, t: Thresholds) -> list[Straggler]:
    """Ranks that arrive last at most of their matched collectives while each other rank waits for
    them, per step (per window), at least STRAGGLER % of the median step (window): late from the
    host (launching, data loading, a sync before the collective) even where their GPU work is not longer."""
    spans = [(r.step_ns if steps else r.window_ns) or 0 for r in rows]
    median = float(np.median(spans))
    out = []
    for i, r in enumerate(rows):
        tally = crossed.tallies[i]
        # per step: only the collectives inside the steps (warm-up and start-up broadcasts are not a step's)
        matched, last, caused = (
            (tally.steps_matched, tally.steps_last_arrivals, tally.steps_caused_ns)
            if steps
            else (tally.matched, tally.last_arrivals, tally.caused_ns)
        )
        if not median or not matched or 2 * last <= matched:
            continue
        wait = caused / (len(rows) - 1) / (r.steps if steps else 1)
        share = wait * 100.0 / median
        if share >= t.STRAGGLER:
            out.append(_straggler_of(r, crossed, i, "arrival", wait, median, share))
    return out


def _straggler_of(r: RankRow, crossed: Across, i: int, basis: str, v: float, median: float, over: float) -> Straggler:
    tally = crossed.tallies[i]
    return Straggler(
        label=r.label,
        rank=r.rank,
        basis=basis,
        time_ns=round(v),
        median_ns=round(median),
        over_pct=round(float(over), 1),
        last_arrivals=tally.last_arrivals,
        matched=tally.matched,
        others_wait_ns=tally.caused_ns,
    )


def findings(rows: Sequence[RankRow], slow: Sequence[Straggler], t: Thresholds) -> list[Finding]:
    out = [f for f in (_straggler(slow, t), _low_overlap(rows, t), _comm_bound(rows, t)) if f is not None]
    return ordered(out)


def _straggler(slow: Sequence[Straggler], t: Thresholds) -> Finding | None:
    if not slow:
        return None
    s = slow[0]
    arrivals = f"it arrived last at {s.last_arrivals} of {s.matched} matched collectives"
    if s.basis == "arrival":
        message = (
            f"rank {s.label} keeps the others waiting: {arrivals}, and each other rank waits "
            f"{ms(s.time_ns)} for it per step, {s.over_pct:g}% of the median step of {ms(s.median_ns)}, "
            "while its GPU work is not longer. Look at its host: data loading, launches, a sync or "
            "logging before the collective"
        )
    else:
        wait = f", where the other ranks waited {ms(s.others_wait_ns)} in all" if s.others_wait_ns else ""
        message = (
            f"rank {s.label}'s {s.basis} is {ms(s.time_ns)}, {s.over_pct:g}% over the ranks' median of "
            f"{ms(s.median_ns)}{'; ' + arrivals if s.matched else ''}{wait}. Balance the work (uneven batches "
            "or sequence lengths, a slower GPU or host, data loading on that rank)"
        )
    return make("STRAGGLER", s.over_pct, t.STRAGGLER, message)


def _low_overlap(rows: Sequence[RankRow], t: Thresholds) -> Finding | None:
    steps = on_steps(rows)
    parts = [scoped(r, steps) for r in rows]
    comm = sum(p.comm_ns for p in parts)
    window = sum(p.window_ns for p in parts)
    if not comm or comm < t.min_cost_ms * 1e6 or comm * 100.0 < t.min_cost_pct * window:
        return None
    value = sum(p.overlap_ns for p in parts) * 100.0 / comm
    if value >= t.LOW_OVERLAP:
        return None
    low = min(zip(rows, parts, strict=True), key=lambda rp: rp[1].overlap_pct or 0.0)
    return make(
        "LOW_OVERLAP",
        value,
        t.LOW_OVERLAP,
        f"{value:.1f}% of the communication ({ms(comm)} over {len(rows)} ranks) runs beside compute "
        f"(rank {low[0].label}: {low[1].overlap_pct or 0:.1f}%). Overlap it: DDP buckets (bucket_cap_mb) "
        "that start during backward, FSDP prefetching, no host sync between backward and the collectives",
        below=True,
    )


def _comm_bound(rows: Sequence[RankRow], t: Thresholds) -> Finding | None:
    steps = on_steps(rows)
    shares = [(r, p.exposed_comm_ns * 100.0 / p.window_ns) for r in rows if (p := scoped(r, steps)).window_ns]
    if not shares:
        return None
    r, value = max(shares, key=lambda rv: rv[1])
    if value < t.COMM_BOUND:
        return None
    where = "its steps" if steps else "its window"
    return make(
        "COMM_BOUND",
        value,
        t.COMM_BOUND,
        f"rank {r.label} spends {value:.1f}% of {where} in communication with no compute beside it "
        f"({ms(scoped(r, steps).exposed_comm_ns)}). Overlap it with compute, send less (gradient compression, "
        "bf16 gradients, fewer/larger buckets), or check the interconnect's bandwidth (busbw in `traceconv ranks`)",
    )
