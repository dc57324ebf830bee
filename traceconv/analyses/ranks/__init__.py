"""``traceconv ranks``: a multi-rank run rank by rank, and its collectives across the ranks.

:func:`analyse` reads the input one rank at a time (:mod:`.units`): each rank's GPU time split
into compute, communication, copies and idle over its window (first to last GPU activity of its
device) and over its steps, with the share of communication hidden behind compute; then its
communication kernels (:mod:`.calls`), matched across the ranks of their process group and
aligned on one clock (:mod:`.match`), each with its skew, last rank and bandwidth
(:mod:`.across`); the stragglers and the findings STRAGGLER, LOW_OVERLAP, COMM_BOUND
(:mod:`.verdicts`). :func:`as_dict` is the JSON form.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from traceconv.analyses import intervals as I
from traceconv.analyses.prepare import as_source, step_hint
from traceconv.analyses.ranks import calls as C
from traceconv.analyses.ranks import match as M
from traceconv.analyses.ranks import units as U
from traceconv.analyses.ranks.across import Across, across
from traceconv.analyses.ranks.model import Breakdown, Collective, RankRow, RanksReport, Straggler
from traceconv.analyses.ranks.verdicts import findings, stragglers
from traceconv.analyses.results import plain
from traceconv.analyses.source import Source
from traceconv.analyses.steps import STEP_PATTERN, Steps
from traceconv.analyses.thresholds import DEFAULTS, Thresholds
from traceconv.errors import UsageError

__all__ = ["Breakdown", "Collective", "RankRow", "RanksReport", "Straggler", "analyse", "as_dict", "several"]


def analyse(
    data: pa.Table | Source, step_pattern: str = STEP_PATTERN, thresholds: Thresholds = DEFAULTS
) -> RanksReport:
    """Every rank of the input (a :class:`Source` or a unified table) and its collectives."""
    source = as_source(data)
    found = U.units(source)
    if not found:
        raise UsageError(None, "the input has no GPU rows (kernels, copies)", "profile with CUDA activities on")
    measured = [_measure(source, u, step_pattern) for u in found]
    calls = [C.calls(source, u) for u in found]
    grouped = M.groups(calls)
    offsets = M.offsets(calls, grouped, 0)
    steps = [I.union(m[2].start_ns, m[2].end_ns) if m[2] is not None else None for m in measured]
    crossed = across(calls, grouped, offsets, steps)
    rows = [_row(u, m, calls[i], crossed, offsets[i], i) for i, (u, m) in enumerate(zip(found, measured, strict=True))]
    slow = stragglers(rows, crossed, thresholds)
    return RanksReport(
        source="+".join(sorted({u.source for u in found})),
        ranks=rows,
        collectives=crossed.collectives,
        unmatched=crossed.unmatched,
        reference=found[0].label if len(found) > 1 else None,
        clock_offsets_ns={u.label: offsets[i] for i, u in enumerate(found)} if len(found) > 1 else {},
        stragglers=slow,
        findings=findings(rows, slow, thresholds) if len(found) > 1 else [],
        notes=_notes(found, calls, grouped, crossed, offsets) + _step_notes(source, measured, step_pattern),
    )


def several(source: Source) -> bool:
    """Whether the input holds more than one rank (``summary`` then shows them rank by rank)."""
    return U.count(source) > 1


def as_dict(report: RanksReport) -> dict[str, Any]:
    out: dict[str, Any] = plain(report)
    return out


_Measured = tuple[U.GpuRows, Breakdown, Steps | None, Breakdown | None]


def _measure(source: Source, unit: U.Unit, step_pattern: str) -> _Measured:
    gpu = U.gpu_rows(source, unit)
    whole = U.breakdown(gpu, _segments([gpu.start_ns], [gpu.end_ns]))
    steps = U.unit_steps(source, unit, step_pattern)
    in_steps = U.breakdown(gpu, I.union(steps.start_ns, steps.end_ns)) if steps is not None else None
    return gpu, whole, steps, in_steps


def _segments(starts: list[int], ends: list[int]) -> tuple[I.I64, I.I64]:
    return np.array(starts, np.int64), np.array(ends, np.int64)


def _row(unit: U.Unit, m: _Measured, c: C.Calls, crossed: Across, offset: int | None, i: int) -> RankRow:
    gpu, w, steps, in_steps = m
    t = crossed.tallies[i]
    return RankRow(
        rank=unit.rank,
        label=unit.label,
        trace_id=str(unit.trace_id),
        pid=unit.pid,
        device=unit.device,
        start_ns=gpu.start_ns,
        end_ns=gpu.end_ns,
        window_ns=w.window_ns,
        compute_ns=w.compute_ns,
        comm_ns=w.comm_ns,
        copy_ns=w.copy_ns,
        idle_ns=w.idle_ns,
        overlap_ns=w.overlap_ns,
        overlap_pct=w.overlap_pct,
        exposed_comm_ns=w.exposed_comm_ns,
        steps=steps.count if steps is not None else 0,
        step_ns=steps.median_ns if steps is not None else None,
        in_steps=in_steps,
        collectives=len(c.rows),
        matched=t.matched,
        wait_ns=t.wait_ns,
        last_arrivals=t.last_arrivals,
        clock_offset_ns=offset,
    )


def _step_notes(source: Source, measured: list[_Measured], step_pattern: str) -> list[str]:
    """Without steps, each rank is measured over its whole window: said, with how to mark them."""
    if any(m[2] is not None for m in measured):
        return []
    return [
        f"no range matches --steps {step_pattern!r}: each rank is measured over its whole window; {step_hint(source)}"
    ]


def _notes(
    found: list[U.Unit], calls: list[C.Calls], grouped: list[M.Group], crossed: Across, offsets: dict[int, int | None]
) -> list[str]:
    out = []
    if len(found) == 1:
        out.append("the input holds one rank: nothing to match its collectives with")
    for g in grouped:
        for m in g.unaligned:
            out.append(
                f"rank {found[m].label}: its collectives in process group {g.name} could not be lined up with "
                f"rank {found[g.reference].label}'s (no shift agrees on names and sizes, or two fit as well): "
                "counted as unmatched"
            )
    if crossed.unmatched and len(found) > 1:
        out.append(
            f"{crossed.unmatched} communication kernel(s) have no counterpart on every other rank of their group "
            "(windows that cover different collectives): counted, not matched"
        )
    missing = [found[i].label for i, v in offsets.items() if v is None]
    if missing and len(found) > 1:
        out.append(f"no matched collective with the reference rank: clock offset unknown for {', '.join(missing)}")
    return out
