"""``whatif`` as text: the step before and predicted after, the critical path of each, what changed."""

from __future__ import annotations

from traceconv.analyses.whatif import WhatIf, as_dict
from traceconv.analyses.whatif.path import PARTS
from traceconv.render.columns import Col
from traceconv.render.path import PART_WORDS
from traceconv.render.table import Doc, json_document
from traceconv.units import ms

PATH_COLS = [Col("Part of the step", "part"), Col("Before ms", "before", "ms"), Col("After ms", "after", "ms")]
RANK_COLS = [
    Col("Rank", "label", shrink=True),
    Col("Changed", "changed"),
    Col("Steps", "steps"),
    Col("Step ms", "step_ns", "ms"),
    Col("Predicted ms", "predicted_step_ns", "ms"),
    Col("Change ms", "delta_ns", "ms"),
]
CHANGE_COLS = [
    Col("Change", "what", shrink=True),
    Col("Calls", "calls", "pct"),
    Col("GPU rows", "gpu_rows", "pct"),
    Col("Host ms taken", "host_ns", "ms"),
    Col("GPU ms taken", "gpu_ns", "ms"),
]


def whatif_text(r: WhatIf, fmt: str, title: str, width: int) -> str:
    if fmt == "json":
        return json_document(as_dict(r)) + "\n"
    doc = Doc(False, width)
    doc.title(f"{title} ({r.source}): what if")
    for note in r.notes:
        doc.line(f"Note: {note}")
    sign = "-" if r.saving_ns >= 0 else "+"
    whose = f" of the job (its slowest rank's: {r.slowest_rank} -> {r.predicted_slowest_rank}; " if r.ranks else " ("
    doc.line(
        f"Step time{whose}{r.steps} steps, median): {ms(r.step_ns)} -> predicted {ms(r.predicted_step_ns)} "
        f"({sign}{ms(abs(r.saving_ns))}, {sign}{abs(r.saving_pct):.1f}%)"
    )
    if r.ranks:
        doc.heading("Each rank's median step, replayed with the others through the collectives")
        rows = [
            {**vars(k), "changed": "yes" if k.changed else "no", "delta_ns": k.predicted_step_ns - k.step_ns}
            for k in r.ranks
        ]
        doc.table(rows, RANK_COLS)
    doc.heading("What each change touches, per step (calls and GPU rows changed, time it takes away)")
    doc.table([{**vars(c), "what": c.what} for c in r.changed], CHANGE_COLS)
    of = f" of rank {r.slowest_rank} -> rank {r.predicted_slowest_rank}" if r.ranks else ""
    doc.heading(f"Critical path of the median step{of} (each part of its time; they sum to the step)")
    before, after = r.critical_path.parts, r.predicted_critical_path.parts
    rows = [{"part": PART_WORDS[p], "before": before[p], "after": after[p]} for p in PARTS if before[p] or after[p]]
    rows.append({"part": "step", "before": r.critical_path.step_ns, "after": r.predicted_critical_path.step_ns})
    doc.table(rows, PATH_COLS)
    return doc.text()
