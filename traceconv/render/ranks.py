"""``ranks`` as text: a terminal table, Markdown, or JSON, from one :class:`RanksReport`.

Tables show the ranks, then the collectives grouped by name, group and size (every instance
is in the JSON), the clock offsets, the stragglers and the findings.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from traceconv.analyses.ranks import RankRow, RanksReport, as_dict
from traceconv.analyses.ranks.compare import RankChange
from traceconv.analyses.ranks.model import Collective
from traceconv.render.columns import Col
from traceconv.render.table import Doc, json_document
from traceconv.units import ms, us

RANK_COLS = [
    Col("Rank", "label"),
    Col("Dev", "device", "id", drop=6),
    Col("PID", "pid", "id", drop=9),
    Col("Window ms", "window_ns", "ms", drop=5),
    Col("Compute ms", "compute_ns", "ms"),
    Col("Comm ms", "comm_ns", "ms"),
    Col("Copy ms", "copy_ns", "ms", drop=4),
    Col("Idle ms", "idle_ns", "ms"),
    Col("Overlap %", "overlap_pct", "pct"),
    Col("Steps", "steps", "int", drop=8),
    Col("Step ms", "step_ns", "ms", drop=7),
    Col("Wait ms", "wait_ns", "ms", drop=3),
    Col("Last", "last_arrivals", "int", drop=2),
]
STEP_COLS = [
    Col("Rank", "label"),
    Col("Steps ms", "window_ns", "ms", drop=1),
    Col("Compute ms", "compute_ns", "ms"),
    Col("Comm ms", "comm_ns", "ms"),
    Col("Exposed ms", "exposed_comm_ns", "ms"),
    Col("Copy ms", "copy_ns", "ms", drop=2),
    Col("Idle ms", "idle_ns", "ms"),
    Col("Overlap %", "overlap_pct", "pct"),
]
COLLECTIVE_COLS = [
    Col("Collective", "collective"),
    Col("Group", "process_group", drop=3),
    Col("Count", "count", "int"),
    Col("MB", "mb", "pct", drop=1),
    Col("Algo", "algorithm", drop=4),
    Col("Time µs", "time_ns", "us"),
    Col("Skew µs", "skew_ns", "us"),
    Col("Max skew µs", "max_skew_ns", "us", drop=2),
    Col("busbw GB/s", "busbw_gbps", "pct"),
    Col("Last rank", "last", shrink=True),
]


def ranks_text(r: RanksReport, fmt: str, title: str, width: int) -> str:
    if fmt == "json":
        return json_document(as_dict(r)) + "\n"
    doc = Doc(fmt == "markdown", width)
    doc.title(f"{title}: {len(r.ranks)} rank(s), {r.source}")
    doc.heading("Ranks (GPU time over each rank's window: first to last GPU activity)")
    doc.table([vars(x) for x in r.ranks], RANK_COLS)
    stepped = [dict(vars(x.in_steps), label=x.label) for x in r.ranks if x.in_steps is not None]
    if stepped:
        doc.heading("Over the steps")
        doc.table(stepped, STEP_COLS)
    doc.heading(f"Collectives matched across ranks ({len(r.collectives)}; {r.unmatched} kernel(s) unmatched)")
    doc.table(collective_rows(r.collectives), COLLECTIVE_COLS)
    if r.clock_offsets_ns:
        offsets = ", ".join(f"{k}: {_offset(v)}" for k, v in r.clock_offsets_ns.items())
        doc.heading(f"Clock offsets from rank {r.reference}'s clock, from the collectives' ends")
        doc.line(offsets)
    doc.heading("Findings")
    doc.findings(r.findings)
    for text in r.notes:
        doc.line(f"note: {text}")
    return doc.text()


def summary_rank_lines(ranks: list[RankRow]) -> list[str]:
    """One line per rank for ``summary`` on a multi-rank input."""
    out = []
    for x in ranks:
        overlap = f"{x.overlap_pct:.1f}%" if x.overlap_pct is not None else "-"
        step = f", step {ms(x.step_ns)}" if x.step_ns is not None else ""
        out.append(
            f"rank {x.label} (GPU {x.device if x.device is not None else '?'}): window {ms(x.window_ns)}, "
            f"compute {ms(x.compute_ns)}, comm {ms(x.comm_ns)} ({overlap} overlapped), copies {ms(x.copy_ns)}, "
            f"idle {ms(x.idle_ns)}{step}"
        )
    return out


def collective_rows(collectives: list[Collective]) -> list[dict[str, Any]]:
    """Instances grouped by collective, process group and size: medians, and the rank most often last."""
    groups: dict[tuple[str, str, int | None, str | None], list[Collective]] = defaultdict(list)
    for c in collectives:
        groups[(c.collective, c.process_group, c.bytes, c.algorithm)].append(c)
    rows = []
    for (name, pg, nbytes, algo), items in groups.items():
        lasts: dict[str, int] = defaultdict(int)
        for c in items:
            lasts[c.last_rank] += 1
        top = max(lasts, key=lambda k: lasts[k])
        bw = [c.busbw_gbps for c in items if c.busbw_gbps is not None]
        rows.append(
            {
                "collective": name,
                "process_group": pg,
                "count": len(items),
                "mb": nbytes / 1e6 if nbytes is not None else None,
                "algorithm": algo,
                "time_ns": float(np.median([c.time_ns for c in items])),
                "skew_ns": float(np.median([c.skew_ns for c in items])),
                "max_skew_ns": max(c.skew_ns for c in items),
                "busbw_gbps": float(np.median(bw)) if bw else None,
                "last": f"{top} ({lasts[top]}/{len(items)})",
            }
        )
    return sorted(rows, key=lambda r: -float(r["time_ns"]) * int(r["count"]))


RANK_CHANGE_COLS = [
    Col("Rank", "label"),
    Col("Step ms", "b_step", "ms"),
    Col("after", "a_step", "ms"),
    Col("Compute ms", "b_compute", "ms", drop=3),
    Col("after", "a_compute", "ms", drop=3),
    Col("Comm ms", "b_comm", "ms"),
    Col("after", "a_comm", "ms"),
    Col("Exposed ms", "b_exposed", "ms", drop=2),
    Col("after", "a_exposed", "ms", drop=2),
    Col("Overlap %", "b_overlap", "pct", drop=1),
    Col("after", "a_overlap", "pct", drop=1),
]


def rank_change_rows(changes: list[RankChange]) -> list[dict[str, Any]]:
    out = []
    for c in changes:
        row: dict[str, Any] = {"label": c.label if c.label == c.before_label else f"{c.before_label} -> {c.label}"}
        for side, f in (("b", c.before), ("a", c.after)):
            row |= {
                f"{side}_step": f.step_ns,
                f"{side}_compute": f.compute_ns,
                f"{side}_comm": f.comm_ns,
                f"{side}_exposed": f.exposed_comm_ns,
                f"{side}_overlap": f.overlap_pct,
            }
        out.append(row)
    return out


def _offset(v: int | None) -> str:
    return "unknown" if v is None else f"{us(v)}"
