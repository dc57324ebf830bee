"""The report's sections: one input's figures (:func:`run_sections`) and two inputs' diff (:func:`diff_section`)."""

from __future__ import annotations

import html
from dataclasses import dataclass

from traceconv.analyses.diff import DiffReport
from traceconv.analyses.summary import SummaryReport
from traceconv.analyses.timeline import Breakdown, Histogram, Timeline
from traceconv.names import kernel_label
from traceconv.render.path import PART_WORDS
from traceconv.render.report import charts as C
from traceconv.render.report.page import Column, Page, count, kpis, mb, ms, notes, pct, signed_ms, table, us


@dataclass(frozen=True)
class RunFigures:
    """What the report shows of one input (see :func:`traceconv.render.report.collect`)."""

    name: str
    summary: SummaryReport
    scope: str  # what the breakdown covers: "steps" or "window"
    breakdown: list[Breakdown]
    steps: list[Breakdown]  # one per lane and step; empty without steps
    timeline: Timeline
    histograms: list[Histogram]


def run_sections(page: Page, run: RunFigures, prefix: str = "") -> None:
    """Every section of one input: overview and findings, time, operators and kernels, copies, memory."""
    s = run.summary
    tag = f"{prefix} " if prefix else ""
    key = prefix.replace(" ", "-").lower() + "-" if prefix else ""
    lacks = [f"not in this profile: {x.missing} ({x.hides}): {x.how}" for x in s.lacks]
    page.section(f"{key}overview", f"{tag}Overview and findings", _overview(s), _findings(s), notes(lacks + s.notes))
    page.section(
        f"{key}time",
        f"{tag}Where the GPU time goes",
        page.chart(C.breakdown(run.breakdown, run.scope), "no GPU work in this input"),
        page.chart(C.critical_path(s.critical_path), _missing(s, "steps", "the input marks no steps")),
        _breakdown_table(run.breakdown, run.scope),
        page.chart(C.steps(run.steps), _missing(s, "steps", "the input marks no steps")),
        page.chart(C.utilisation(run.timeline), "no GPU work in this input"),
        page.chart(C.metrics(run.timeline), _missing(s, "GPU metrics", "no GPU metrics in this input")),
    )
    if s.ranks:
        page.section(f"{key}ranks", f"{tag}Ranks (traceconv ranks compares them in full)", _ranks_table(s))
    page.section(
        f"{key}ops",
        f"{tag}Operators and kernels (whole profiled window)",
        page.chart(C.top_ops(s.top_ops, 1), "no operator launched GPU work"),
        _ops_table(s),
        page.chart(C.top_kernels(s.top_kernels, 1), "no kernels in this input"),
        _kernels_table(s),
        *(page.chart(C.histogram(h), f"no kernel {h.name} times in this input") for h in run.histograms),
    )
    page.section(
        f"{key}roofline",
        f"{tag}Matrix work against the GPU's peaks ({s.findings_scope})",
        _roofline_overview(s),
        page.chart(C.roofline(s.roofline), "no operator's FLOPs are known (record_shapes=True records the shapes)"),
        _roofline_table(s),
    )
    page.section(
        f"{key}copies",
        f"{tag}Copies and memory",
        page.chart(C.copies(run.timeline), "no copies in this input"),
        _copies_table(s),
        page.chart(C.memory(run.timeline, s.memory), _missing(s, "allocator events", "no allocator events")),
        _peaks_table(s),
    )


def _missing(s: SummaryReport, what: str, default: str) -> str:
    """Why a chart is empty: what the profile lacks and the option that records it (the summary's own
    words, for the profiler the input came from), else ``default``."""
    lack = next((x for x in s.lacks if x.missing == what), None)
    return f"not in this profile: {lack.missing} ({lack.hides}): {lack.how}" if lack else default


def _overview(s: SummaryReport) -> str:
    busy = sum(d.busy_ns for d in s.gpu.values())
    items = [
        ("source", s.source),
        ("profiled window", f"{s.window_ns / 1e6:,.2f} ms"),
        ("verdict", f"{s.bound.verdict} ({s.bound.scope})"),
        ("GPU busy", f"{s.bound.gpu_busy_pct:.1f} %"),
        ("GPU busy time", f"{busy / 1e6:,.2f} ms"),
    ]
    if s.steps is not None:
        items.insert(2, ("step time (median)", f"{s.steps.median_ns / 1e6:,.2f} ms × {s.steps.count}"))
    return kpis(items)


def _findings(s: SummaryReport) -> str:
    rows = [
        {"severity": f.severity, "code": f.code, "message": f.message, "value": f.value, "threshold": f.threshold}
        for f in s.findings
    ]
    cols = [Column("severity", "severity"), Column("code", "code"), Column("evidence and fix", "message")]
    cols += [Column("value", "value", count), Column("threshold", "threshold", count)]
    body = table(cols, rows, "no findings: nothing reached its threshold")
    for level in ("high", "medium", "low"):  # severity in colour
        body = body.replace(f'<td class="text">{level}</td>', f'<td class="text sev-{level}">{level}</td>')
    return f"<h3>Findings (measured on the {html.escape(s.findings_scope)})</h3>{body}"


def _breakdown_table(parts: list[Breakdown], scope: str) -> str:
    rows = []
    for b in parts:
        per = max(b.steps, 1)
        row = {"lane": b.label, "window": b.window_ns / per}
        for k in ("compute", "communication", "copies", "idle"):
            ns = getattr(b, f"{k}_ns")
            row[k] = ns / per
            row[f"{k}_pct"] = ns * 100.0 / b.window_ns if b.window_ns else 0.0
        rows.append(row)
    unit = "ms/step" if scope == "steps" else "ms"
    cols = [Column("GPU", "lane"), Column(f"{'step' if scope == 'steps' else 'window'} ({unit})", "window", ms)]
    for k in ("compute", "communication", "copies", "idle"):
        cols += [Column(f"{k} ({unit})", k, ms), Column(f"{k} %", f"{k}_pct", pct)]
    return table(cols, rows)


def _ops_table(s: SummaryReport) -> str:
    rows = [vars(o) for o in s.top_ops]
    cols = [Column("operator", "name"), Column("calls", "calls", count), Column("GPU self (ms)", "gpu_self_ns", ms)]
    cols += [Column("GPU total (ms)", "gpu_total_ns", ms), Column("CPU total (ms)", "cpu_total_ns", ms)]
    cols += [Column("CPU self (ms)", "cpu_self_ns", ms), Column("input dims", "input_dims")]
    return table(cols, rows, "no operators")


def _kernels_table(s: SummaryReport) -> str:
    rows = [{**vars(k), "label": kernel_label(k.name)} for k in s.top_kernels]
    cols = [Column("kernel", "label"), Column("count", "count", count), Column("execution (ms)", "dur_ns", ms)]
    cols += [Column("avg (µs)", "avg_ns", us), Column("queue (ms)", "queue_ns", ms)]
    cols += [Column("avg queue (µs)", "queue_avg_ns", us), Column("% of kernel time", "time_pct", pct)]
    cols += [Column("occupancy %", "occupancy_pct", pct)]
    return table(cols, rows, "no kernels")


def _roofline_overview(s: SummaryReport) -> str:
    r = s.roofline
    if r is None:
        return ""
    m = r.matrix
    items = [("GPU", r.device.model or r.device.name or "unknown")]
    if r.flops_per_step is not None:
        items.append(("TFLOP a step" if r.scope == "steps" else "TFLOP", f"{r.flops_per_step / 1e12:,.3f}"))
        items.append(("achieved TFLOP/s", f"{r.achieved_tflops or 0:,.1f}"))
    if r.mfu_pct is not None:
        items.append((f"MFU (vs {r.mfu_peak_tflops:,.1f} {r.mfu_basis})", f"{r.mfu_pct:.2f} %"))
    if m.matrix_ns:
        items.append(("matrix time on tensor cores", f"{m.tensor_ns * 100 / m.matrix_ns:.0f} %"))
    return kpis(items) + notes(r.notes)


def _roofline_table(s: SummaryReport) -> str:
    rows = [vars(o) for o in (s.roofline.ops if s.roofline else [])]
    cols = [Column("operator", "name"), Column("calls", "calls", count), Column("GPU (ms)", "gpu_ns", ms)]
    cols += [Column("cores", "engine"), Column("type", "dtype"), Column("TFLOP/s", "tflops", count)]
    cols += [Column("GB/s", "gbps", count), Column("FLOP/byte", "intensity", count)]
    cols += [
        Column("roof (TFLOP/s)", "roof_tflops", count),
        Column("bound", "bound"),
        Column("% of roof", "pct_of_roof", pct),
    ]
    return table(cols, rows, "no operator's FLOPs are known")


def _copies_table(s: SummaryReport) -> str:
    rows = [{"dir": k, **vars(c)} for k, c in s.memcpy.items()]
    cols = [Column("direction", "dir"), Column("copies", "count", count), Column("MB", "bytes", mb)]
    cols += [Column("time (ms)", "dur_ns", ms), Column("GB/s", "bandwidth_gbps", count)]
    cols += [Column("% of GPU time", "gpu_time_pct", pct), Column("pageable", "pageable_count", count)]
    cols += [Column("pinned", "pinned_count", count)]
    return table(cols, rows, "no copies")


def _ranks_table(s: SummaryReport) -> str:
    """Per rank: its step, and its GPU time over its steps (its window without steps) by class, per step."""
    rows = []
    for r in s.ranks or []:
        b = r.in_steps
        n = max(r.steps, 1) if b is not None else 1
        part = b if b is not None else r
        rows.append(
            {
                "rank": r.label,
                "step": r.step_ns,
                "compute": part.compute_ns / n,
                "comm": part.comm_ns / n,
                "exposed": part.exposed_comm_ns / n,
                "idle": part.idle_ns / n,
                "wait": r.wait_ns / max(r.steps, 1),
                "last": r.last_arrivals,
            }
        )
    cols = [Column("rank", "rank"), Column("step (ms)", "step", ms), Column("compute (ms)", "compute", ms)]
    cols += [Column("communication (ms)", "comm", ms), Column("exposed communication (ms)", "exposed", ms)]
    cols += [Column("idle (ms)", "idle", ms), Column("waiting for other ranks (ms)", "wait", ms)]
    cols += [Column("arrived last", "last", count)]
    return table(cols, rows, "one rank")


def _peaks_table(s: SummaryReport) -> str:
    """Each device's allocated peak as the summary measures it (the same peak, time and units as the
    terminal's), and what held it: the allocations live at the peak, by the operator that made them."""
    rows = [
        {
            "device": dev,
            "allocated": m.allocated_peak_bytes,
            "at": m.peak_offset_ns,
            "reserved": m.reserved_at_peak_bytes,
            "holders": "; ".join(f"{h.name} {h.bytes / 1e6:,.1f} MB x{h.count}" for h in m.holders[:HOLDERS]) or "-",
        }
        for dev, m in s.memory.items()
    ]
    cols = [Column("device", "device"), Column("peak allocated (MB)", "allocated", mb)]
    cols += [Column("at (ms from the start)", "at", ms), Column("reserved then (MB)", "reserved", mb)]
    cols += [Column("live at the peak, by the operator that allocated it", "holders")]
    return table(cols, rows, "no allocator events")


HOLDERS = 5


def diff_section(page: Page, d: DiffReport, before: str, after: str) -> None:
    """Step time, GPU time, verdicts, findings gone and new, the kernels, operators and copies that changed."""
    b, a, delta = d.before, d.after, d.delta
    per = "per step" if d.scope == "steps" else "in the window"
    rows = [
        {"what": f"step time ({per})", "before": b.step_ns, "after": a.step_ns, "delta": delta.step_ns},
        {"what": f"GPU time ({per})", "before": b.gpu_time_ns, "after": a.gpu_time_ns, "delta": delta.gpu_time_ns},
    ]
    if b.critical_path is not None and a.critical_path is not None:  # the median step by what it waited for
        for key, words in PART_WORDS.items():
            x, y = b.critical_path.parts.get(key, 0), a.critical_path.parts.get(key, 0)
            if x or y:
                rows.append({"what": f"critical path: {words}", "before": x, "after": y, "delta": y - x})
    cols = [Column("", "what"), Column(f"{before} (ms)", "before", ms), Column(f"{after} (ms)", "after", ms)]
    cols.append(Column("change (ms)", "delta", signed_ms))
    verdicts = kpis([("verdict before", b.bound.verdict), ("verdict after", a.bound.verdict)])
    f = delta.findings
    changes = kpis(
        [
            ("findings gone", ", ".join(f.gone) or "none"),
            ("findings new", ", ".join(f.new) or "none"),
            ("findings kept", ", ".join(k.code for k in f.kept) or "none"),
        ]
    )
    ops = [{**r, "b": r["before"]["gpu_self_ns"], "a": r["after"]["gpu_self_ns"]} for r in delta.top_ops]
    # by the change the table shows (the delta's own order weighs CPU time and calls too), shown ones only
    ops = sorted((o for o in ops if o["b"] or o["a"]), key=lambda o: -abs(o["gpu_self_ns"]))
    op_cols = [Column("operator", "name"), Column("status", "status"), Column("GPU self before (ms)", "b", ms)]
    op_cols += [Column("after (ms)", "a", ms), Column("change (ms)", "gpu_self_ns", signed_ms)]
    copies = [{"dir": k, **vars(c)} for k, c in delta.memcpy.items()]
    copy_cols = [Column("direction", "dir"), Column("status", "status"), Column("copies", "count", count)]
    copy_cols += [Column("MB", "bytes", mb), Column("time (ms)", "dur_ns", signed_ms)]
    page.section(
        "diff",
        f"What changed: {before} → {after}",
        table(cols, rows),
        verdicts,
        changes,
        page.chart(C.diff_kernels(delta.top_kernels, d.scope), "no kernel changed"),
        f"<h3>Operators ({per})</h3>",
        table(op_cols, ops, "no operator changed"),
        f"<h3>Copies ({per}, after − before)</h3>",
        table(copy_cols, copies, "no copies in either run"),
        *_diff_metrics(d),
        notes(([d.note] if d.note else []) + d.notes),
    )


def _diff_metrics(d: DiffReport) -> list[str]:
    """GPU metrics before and after (SM activity ...), as the terminal's diff shows them."""
    rows = [
        {
            "metric": f"{METRIC_WORDS.get(k, k)} · GPU {dev}",
            "before": d.before.gpu_metrics[dev][k],
            "after": v,
            "delta": ch,
        }
        for dev, changes in d.delta.gpu_metrics.items()
        for k, ch in changes.items()
        if dev in d.before.gpu_metrics
        and k in d.before.gpu_metrics[dev]
        and (v := d.after.gpu_metrics[dev][k]) is not None
    ]
    if not rows:
        return []
    cols = [Column("GPU metric (mean of the samples)", "metric"), Column("before", "before", pct)]
    cols += [Column("after", "after", pct), Column("change (points)", "delta", pct)]
    return ["<h3>GPU metrics</h3>", table(cols, rows)]


METRIC_WORDS = {
    "sm_active_pct": "SMs active %",
    "sm_issue_pct": "SM issue %",
    "warps_in_flight_pct": "warps in flight %",
    "tensor_active_pct": "Tensor active %",
    "dram_read_pct": "DRAM read %",
    "dram_write_pct": "DRAM write %",
}
