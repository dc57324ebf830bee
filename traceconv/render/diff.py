"""``diff`` as text: a terminal table, Markdown, or JSON, from one :class:`DiffReport`.

Every figure is per step (per profiled window when a run marks no steps; the note says so).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from traceconv.analyses.diff import DiffReport, report_dict
from traceconv.analyses.diff_results import CopyChange, CopyTotals, FindingChanges, SyncChange, SyncShare
from traceconv.analyses.results import SYNC_KINDS
from traceconv.names import kernel_label
from traceconv.render.columns import Col
from traceconv.render.path import path_change
from traceconv.render.ranks import RANK_CHANGE_COLS, rank_change_rows
from traceconv.render.summary import SHORT_LISTS, TABLE_WIDTH
from traceconv.render.table import Doc, json_document
from traceconv.units import count, ms, signed, us

DELTA_OP_COLS = [
    Col("ΔGPU self ms", "gpu_self_ns", "ms"),
    Col("ΔCPU self ms", "cpu_self_ns", "ms", drop=3),
    Col("GPU before", "b_gpu", "ms", drop=2),
    Col("after", "a_gpu", "ms", drop=2),
    Col("Calls", "b_calls", "pct", drop=1),
    Col("after", "a_calls", "pct", drop=1),
    Col("Status", "status"),
    Col("Operator", "name", shrink=True),
]
DELTA_KERNEL_COLS = [
    Col("Δ Exec ms", "dur_ns", "ms"),
    Col("Exec before", "b_dur", "ms", drop=2),
    Col("after", "a_dur", "ms", drop=2),
    Col("Count before", "b_count", "pct", drop=1),
    Col("after", "a_count", "pct", drop=1),
    Col("Status", "status"),
    Col("Kernel", "name", shrink=True),
]
FAMILY_COLS = [
    Col("Before ms", "before_ns", "ms"),
    Col("Launches", "before_launches", "pct", drop=2),
    Col("After ms", "after_ns", "ms"),
    Col("Launches", "after_launches", "pct", drop=2),
    Col("Fused ms", "after_fused_ns", "ms", drop=1),
    Col("Family", "family"),
    Col("Fused with", "with", shrink=True, null=""),
]
DELTA_COPY_COLS = [
    Col("Dir", "dir"),
    Col("Count before", "b_count", "pct"),
    Col("after", "a_count", "pct"),
    Col("MB before", "b_mb", "pct"),
    Col("after", "a_mb", "pct"),
    Col("ms before", "b_dur", "ms", drop=1),
    Col("after", "a_dur", "ms", drop=1),
    Col("Status", "status"),
]
DELTA_SYNC_COLS = [
    Col("Kind", "kind"),
    Col("Before", "before", "pct"),
    Col("After", "after", "pct"),
    Col("Status", "status"),
    Col("Caused by", "label", shrink=True),
]


def diff_text(d: DiffReport, fmt: str, before: str, after: str, width: int = TABLE_WIDTH) -> str:
    """The diff as a terminal table, Markdown or JSON; all figures per step (or per window, see the note)."""
    if fmt == "json":
        return json_document(report_dict(d)) + "\n"
    b, a, delta = d.before, d.after, d.delta
    doc = Doc(fmt == "markdown", width)
    unit = "step" if d.scope == "steps" else "window"
    doc.title(f"{before} -> {after}, per {unit}")
    for note in [d.note, *d.notes]:
        if note:
            doc.line(f"Note: {note}")
    if d.scope == "steps":
        doc.line(f"Steps: {b.steps} {b.label} -> {a.steps} {a.label}")
    change = f", {delta.step_ns * 100.0 / b.step_ns:+.1f}%" if b.step_ns else ""
    moved = signed(ms(delta.step_ns), delta.step_ns)
    median = " (median)" if d.scope == "steps" else ""
    doc.line(f"{unit.capitalize()} time{median}: {ms(b.step_ns)} -> {ms(a.step_ns)} ({moved}{change})")
    doc.line(
        f"GPU time per {unit}: {ms(b.gpu_time_ns)} -> {ms(a.gpu_time_ns)}; verdict "
        f"{b.bound.verdict} ({b.bound.gpu_busy_pct:.1f}% busy) -> {a.bound.verdict} ({a.bound.gpu_busy_pct:.1f}% busy)"
    )
    if b.critical_path is not None and a.critical_path is not None:
        doc.line(path_change(b.critical_path, a.critical_path))
    _findings(doc, delta.findings)
    _gpu_metrics(doc, b.gpu_metrics, a.gpu_metrics)
    if d.ranks:
        doc.heading(f"Ranks, per {d.ranks[0].per}")
        doc.table(rank_change_rows(d.ranks), RANK_CHANGE_COLS)
    doc.heading(f"Copies per {unit}")
    doc.table(_copy_rows(b.memcpy, a.memcpy, delta.memcpy), DELTA_COPY_COLS)
    doc.heading(
        f"Synchronisations per {unit}: {count(b.sync.count)} -> {count(a.sync.count)} "
        f"({us(b.sync.dur_ns)} -> {us(a.sync.dur_ns)} blocked)"
    )
    kinds: list[tuple[str, SyncShare, SyncShare, SyncChange]] = [
        (w, getattr(b.sync, k), getattr(a.sync, k), getattr(delta.sync, k)) for k, w in SYNC_KINDS.items()
    ]
    doc.line(", ".join(f"{w} {count(x.count)} -> {count(y.count)}" for w, x, y, _ in kinds))
    doc.table([{**asdict(o), "kind": w, "label": o.label} for w, _, _, dd in kinds for o in dd.ops], DELTA_SYNC_COLS)
    doc.heading(f"Operators per {unit}, biggest change first")
    doc.table([_flat(o, "gpu_self_ns", "calls", "gpu", "calls") for o in delta.top_ops], DELTA_OP_COLS)
    _families(doc, d, unit)
    doc.heading(f"Kernels per {unit}, biggest change first")
    short = None if doc.markdown else SHORT_LISTS
    doc.table(
        [
            {**_flat(k, "dur_ns", "count", "dur", "count"), "name": kernel_label(k["name"])}
            for k in delta.top_kernels[:short]
        ],
        DELTA_KERNEL_COLS,
    )
    return doc.text()


def _families(doc: Doc, d: DiffReport, unit: str) -> None:
    """What a compiler fused: per operator family, the kernels doing its work before and after."""
    if not d.families:
        return
    doc.heading(
        f"Operator families per {unit}: GPU time of the kernels doing each family's work (a fused Triton "
        "kernel counts in every family it fuses; fused ms: in such kernels)"
    )
    rows = [{**asdict(f), "with": ", ".join(f.fused_with)} for f in d.families[: None if doc.markdown else 12]]
    doc.table(rows, FAMILY_COLS)


# GPU metrics shown in a diff, as (label, key).
_METRICS = (("SMs active", "sm_active_pct"), ("warps in flight", "warps_in_flight_pct"), ("SM issue", "sm_issue_pct"))


def _gpu_metrics(doc: Doc, b: dict[str, dict[str, float]], a: dict[str, dict[str, float]]) -> None:
    for dev in sorted(set(b) & set(a)):
        said = ", ".join(
            f"{label} {b[dev][k]:.1f}% -> {a[dev][k]:.1f}%" for label, k in _METRICS if k in b[dev] and k in a[dev]
        )
        if said:
            doc.line(f"GPU {dev} metrics (mean of the samples): {said}")


def _findings(doc: Doc, f: FindingChanges) -> None:
    doc.heading("Findings")
    doc.line("gone: " + (", ".join(f.gone) or "none"))
    doc.line("new: " + (", ".join(f.new) or "none"))
    kept = "; ".join(f"{k.code} {k.before:g} -> {k.after:g} ({k.severity[0]} -> {k.severity[1]})" for k in f.kept)
    doc.line("still there: " + (kept or "none"))


def _copy_rows(
    b: dict[str, CopyTotals], a: dict[str, CopyTotals], delta: dict[str, CopyChange]
) -> list[dict[str, Any]]:
    zero = CopyTotals(0, 0, 0)
    rows = []
    for direction, dd in delta.items():
        x, y = b.get(direction, zero), a.get(direction, zero)
        rows.append(
            {
                "dir": direction,
                "status": dd.status,
                "b_count": x.count,
                "a_count": y.count,
                "b_mb": x.bytes / 1e6,
                "a_mb": y.bytes / 1e6,
                "b_dur": x.dur_ns,
                "a_dur": y.dur_ns,
            }
        )
    return rows


def _flat(item: dict[str, Any], time_key: str, count_key: str, time_col: str, count_col: str) -> dict[str, Any]:
    """A row of a per-name change table, with its before and after figures as columns of their own."""
    return {
        **item,
        f"b_{time_col}": item["before"][time_key],
        f"a_{time_col}": item["after"][time_key],
        f"b_{count_col}": item["before"][count_key],
        f"a_{count_col}": item["after"][count_key],
    }
