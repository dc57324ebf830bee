"""``whatif`` as text: the step before and predicted after, the critical path of each, what changed."""

from __future__ import annotations

from traceconv.analyses.whatif import WhatIf, as_dict
from traceconv.analyses.whatif.path import PARTS
from traceconv.render.columns import Col
from traceconv.render.path import PART_WORDS
from traceconv.render.table import Doc, json_document
from traceconv.units import ms

PATH_COLS = [Col("Part of the step", "part"), Col("Before ms", "before", "ms"), Col("After ms", "after", "ms")]
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
    doc.line(
        f"Step time ({r.steps} steps, median): {ms(r.step_ns)} -> predicted {ms(r.predicted_step_ns)} "
        f"({sign}{ms(abs(r.saving_ns))}, {sign}{abs(r.saving_pct):.1f}%)"
    )
    doc.heading("What each change touches, per step (calls and GPU rows changed, time it takes away)")
    doc.table([{**vars(c), "what": c.what} for c in r.changed], CHANGE_COLS)
    doc.heading("Critical path of the median step (each part of its time; they sum to the step)")
    before, after = r.critical_path.parts, r.predicted_critical_path.parts
    rows = [{"part": PART_WORDS[p], "before": before[p], "after": after[p]} for p in PARTS if before[p] or after[p]]
    rows.append({"part": "step", "before": r.critical_path.step_ns, "after": r.predicted_critical_path.step_ns})
    doc.table(rows, PATH_COLS)
    return doc.text()
