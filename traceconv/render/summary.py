"""``summary`` as text: a terminal table, Markdown, or JSON, from one :class:`SummaryReport`.

Terminal output fits ``width`` columns (100 by default): long names are cut with an
ellipsis and findings wrap. JSON is the report field for field (``analyses.results.plain``).
"""

from __future__ import annotations

from dataclasses import asdict

from traceconv.analyses.results import (
    SYNC_KINDS,
    Copies,
    IdleGaps,
    OpRow,
    StepFigures,
    SyncTally,
)
from traceconv.analyses.roofline import Roofline
from traceconv.analyses.summary import SummaryReport, report_dict
from traceconv.names import kernel_label
from traceconv.render.columns import Col
from traceconv.render.memory import memory_section
from traceconv.render.path import path_line
from traceconv.render.ranks import summary_rank_lines
from traceconv.render.table import Doc, json_document
from traceconv.units import count, ms, size, us

TABLE_WIDTH = 100
SORTED_BY = {
    "gpu_self_ns": "self GPU time",
    "gpu_total_ns": "total GPU time",
    "cpu_self_ns": "self CPU time",
    "cpu_total_ns": "CPU time",
    "calls": "calls",
}
SHORT_LISTS = 5  # rows of the ranges and kernels tables in a terminal

OP_COLS = [
    Col("GPU self ms", "gpu_self_ns", "ms"),
    Col("GPU total ms", "gpu_total_ns", "ms"),
    Col("CPU ms", "cpu_total_ns", "ms", drop=1),
    Col("CPU self ms", "cpu_self_ns", "ms"),
    Col("Calls", "calls", "int"),
    Col("Operator [input dims]", "label", shrink=True),
]
RANGE_COLS = [
    Col("GPU ms", "gpu_ns", "ms"),
    Col("Process GPU ms", "gpu_process_ns", "ms"),
    Col("Time ms", "dur_ns", "ms"),
    Col("Count", "count", "int"),
    Col("Range", "name", shrink=True),
]
KERNEL_COLS = [
    Col("Time %", "time_pct", "pct"),
    Col("Exec ms", "dur_ns", "ms"),
    Col("Count", "count", "int"),
    Col("Avg µs", "avg_ns", "us"),
    Col("Queue avg µs", "queue_avg_ns", "us", drop=1),
    Col("Occ %", "occupancy_pct", "pct", drop=2),
    Col("Kernel", "label", shrink=True),
]
REGION_COLS = [
    Col("GPU ms", "gpu_ns", "ms"),
    Col("Triton ms", "triton_ns", "ms"),
    Col("Kernels", "kernels", "int"),
    Col("Calls", "calls", "int"),
    Col("Host ms", "host_ns", "ms", drop=1),
    Col("Compiled region", "name", shrink=True),
]
FUSED_COLS = [
    Col("GPU ms", "gpu_ns", "ms"),
    Col("Launches", "launches", "int"),
    Col("Kernels", "kernels", "int"),
    Col("Operation", "op", shrink=True),
]
COPY_COLS = [
    Col("Dir", "dir"),
    Col("Count", "count", "int"),
    Col("MB", "mb", "pct"),
    Col("ms", "dur_ns", "ms"),
    Col("GB/s", "bandwidth_gbps", "pct", drop=1),
    Col("GPU %", "gpu_time_pct", "pct"),
    Col("Pageable", "pageable_count", "int", drop=2),
    Col("Pinned", "pinned_count", "int", drop=2),
    Col("Issued by", "issuer", shrink=True),
]


def summary_text(r: SummaryReport, fmt: str, title: str, width: int = TABLE_WIDTH) -> str:
    """The summary as a terminal table (``table``), Markdown (``markdown``) or JSON (``json``)."""
    if fmt == "json":
        return json_document(report_dict(r)) + "\n"
    doc = Doc(fmt == "markdown", width)
    doc.title(f"{title} ({r.source})")
    for lack in r.lacks:
        doc.line(f"Not in this profile: {lack.missing} ({lack.hides}): {lack.how}")
    for note in r.notes:
        doc.line(f"Note: {note}")
    _overview(doc, r)
    doc.heading(f"Findings ({_scope_words(r.findings_scope, r.steps)})")
    doc.findings(r.findings)
    doc.heading(f"Top operators by {SORTED_BY.get(r.sort, r.sort)}")
    doc.table([{**asdict(o), "label": with_dims(o)} for o in r.top_ops], OP_COLS)
    short = None if doc.markdown else SHORT_LISTS
    doc.heading("Host annotations and NVTX ranges (GPU time launched inside: on their thread; by any thread)")
    doc.table([asdict(n) for n in r.nvtx[:short]], RANGE_COLS)
    doc.heading("Top kernels by execution time (queue: launch call's end to kernel start)")
    doc.table([{**asdict(k), "label": kernel_label(k.name)} for k in r.top_kernels[:short]], KERNEL_COLS)
    _graphs(doc, r)
    _compiled(doc, r)
    doc.heading("Copies")
    doc.table(copy_rows(r.memcpy), COPY_COLS)
    _syncs(doc, r)
    memory_section(doc, r.memory)
    _gpu_metrics(doc, r)
    return doc.text()


def _compiled(doc: Doc, r: SummaryReport) -> None:
    """torch.compile's regions, what its Triton kernels fuse, and its compilations (nothing without them)."""
    c = r.compiled
    if c is None:
        return
    share = c.in_regions_ns * 100.0 / c.gpu_ns if c.gpu_ns else 0.0
    doc.heading("Compiled program (torch.compile; GPU time of the kernels launched inside each region)")
    inside = (
        f"{ms(c.in_regions_ns)} of {ms(c.gpu_ns)} kernel time ({share:.0f}%) launched inside compiled regions"
        if c.regions
        else f"no compiled region's range in the profile (Nsight Systems has them only where PyTorch emits NVTX); "
        f"{ms(c.gpu_ns)} of kernel time"
    )
    doc.line(f"{inside}; Triton kernels {ms(c.triton_ns)} in {c.triton_launches:,} launches")
    if c.compiles:
        made = [x.region.removeprefix("Torch-Compiled Region: ") for x in c.compiles if x.region]
        doc.line(
            f"{len(c.compiles)} compilations (Dynamo), {ms(c.compile_ns)} of host time"
            + (f"; regions they made: {', '.join(made[:8])}{' ...' if len(made) > 8 else ''}" if made else "")
        )
    short = None if doc.markdown else SHORT_LISTS
    if c.regions:
        doc.table([asdict(x) for x in c.regions[:short]], REGION_COLS)
    if c.fused:
        doc.heading("Operations fused by Triton kernels (a kernel fusing several counts in each)")
        doc.table([asdict(x) for x in c.fused[:short]], FUSED_COLS)


GRAPH_COLS = [
    Col("Launches", "launches", "int"),
    Col("Nodes", "nodes"),
    Col("GPU µs/replay", "gpu_ns_per_replay", "us"),
    Col("GPU ms", "gpu_ns", "ms"),
    Col("Launched in", "launched_from", shrink=True, drop=1),
    Col("Graph: its work by the operators that captured it, else its longest nodes", "work", shrink=True),
]


def _graphs(doc: Doc, r: SummaryReport) -> None:
    """The CUDA graphs replayed: per graph its launches and work, and who captured it."""
    g = r.graphs
    if g is None:
        return
    share = g.attributed_gpu_ns * 100.0 / g.replayed_gpu_ns if g.replayed_gpu_ns else 0.0
    doc.heading(f"CUDA graphs replayed ({ms(g.replayed_gpu_ns)} of GPU time; {share:.0f}% of it by capturing operator)")
    rows = []
    for x in g.graphs:
        if x.captured_by:
            work = "; ".join(f"{c.name} x{c.kernels} {us(c.ns_per_replay)}" for c in x.captured_by)
        else:
            work = "; ".join(f"{kernel_label(n.name)} {us(n.ns_per_replay)}" for n in x.longest)
        work = work or f"launched in {x.launched_from or 'no operator or range'}"
        nodes = "whole" if x.rows_per_replay is None else str(x.rows_per_replay)
        rows.append({**asdict(x), "nodes": nodes, "launched_from": x.launched_from or "", "work": f"{x.name}: {work}"})
    doc.table(rows, GRAPH_COLS)
    if g.whole:
        doc.line("Graphs traced whole: their nodes are not known (nsys profile --cuda-graph-trace=node)")
    elif not g.attributed_gpu_ns:
        doc.line(
            "The graphs were captured before the profile: their kernels count under the operator or range "
            "around the launch (capture inside the profile to see the operators that made them)"
        )


def _scope_words(scope: str, steps: StepFigures | None) -> str:
    if scope == "steps" and steps:
        return f"measured on the {steps.count} steps {steps.label}"
    return "measured on the whole window"


def _overview(doc: Doc, r: SummaryReport) -> None:
    s = r.steps
    span = f"Profiled window {ms(r.window_ns)}"
    if s:
        span += f"; {s.count} steps {s.label}: median {ms(s.median_ns)} (min {ms(s.min_ns)}, max {ms(s.max_ns)})"
        span += f"; host ranges {ms(s.cpu_median_ns)}"
        if s.host_ahead_ns is not None:
            ahead = s.host_ahead_ns
            span += f", host {ms(ahead)} ahead of the GPU" if ahead >= 0 else f", GPU waited {ms(-ahead)} for the host"
    doc.line(span)
    if r.ranks:  # several ranks: each on its own line, not merged into the devices of one trace
        for text in summary_rank_lines(r.ranks):
            doc.line(text)
    for dev, g in ({} if r.ranks else r.gpu).items():
        pct = g.busy_ns * 100.0 / g.window_ns if g.window_ns else 0.0
        extra = ""
        if s and dev in s.gpu and s.gpu[dev].window_ns:
            extra = f"; in steps busy {s.gpu[dev].busy_ns * 100.0 / s.gpu[dev].window_ns:.1f}%"
        doc.line(f"GPU {dev}: busy {ms(g.busy_ns)} ({pct:.1f}%), idle {ms(g.idle_ns)}{extra}")
    b = r.bound
    per = s.count if s and b.scope == "steps" else 1
    doc.line(f"Verdict: {b.verdict} (GPU busy {b.gpu_busy_pct:.1f}% of the {b.scope}{gap_words(r.idle_gaps, per)})")
    if r.critical_path is not None:
        doc.line(path_line(r.critical_path))
    if r.roofline is not None and (line := roofline_line(r.roofline)):
        doc.line(line)


def roofline_line(f: Roofline) -> str | None:
    """ "Roofline (H200 SXM): 0.42 TFLOP a step, 21.4 TFLOP/s, MFU 2.2% of 989.5 TFLOP/s bf16; matrix
    kernels 9.47 ms a step: 93% on CUDA cores" (None without kernels)."""
    m = f.matrix
    if not m.matrix_ns and not m.other_ns:
        return None
    gpu = f.device.model or (f"{f.device.name}, peaks unknown" if f.device.name else "peaks unknown")
    each = " a step" if f.scope == "steps" else ""
    if f.flops_per_step is None:
        work = "FLOPs not known (no input shapes)"
    else:
        work = f"{f.flops_per_step / 1e12:,.2f} TFLOP{each}, {f.achieved_tflops or 0:,.1f} TFLOP/s"
        if f.mfu_pct is not None:
            work += f", MFU {f.mfu_pct:.1f}% of {f.mfu_peak_tflops:,.1f} TFLOP/s {f.mfu_basis}"
    per = max(f.steps, 1) * max(f.gpus, 1)
    engines = ", ".join(
        f"{ns * 100 / m.matrix_ns:.0f}% {what}"
        for what, ns in (("on tensor cores", m.tensor_ns), ("on CUDA cores", m.cuda_ns), ("unknown", m.unknown_ns))
        if ns
    )
    matrix = f"matrix kernels {ms(m.matrix_ns / per)}{each}: {engines}" if m.matrix_ns else "no matrix kernels"
    return f"Roofline ({gpu}): {work}; {matrix}"


def gap_words(g: IdleGaps, per: int) -> str:
    """ "; idle gaps a step: host work 27 ms, ..." for the causes of the GPUs' idle gaps that are there."""
    parts = [(what, getattr(g, name)) for name, what in GAP_PARTS.items()]
    said = ", ".join(f"{what} {ms(ns / per)}" for what, ns in parts if ns)
    each = " a step" if per > 1 else ""
    return f"; idle{each} after: {said}" if said else ""


GAP_PARTS = {
    "host_ns": "host work",
    "launch_ns": "launches",
    "result_wait_ns": "result waits",
    "staging_ns": "pageable copies",
    "queued_ns": "GPU-side waits",
}


def with_dims(o: OpRow) -> str:
    """An operator with its most frequent input dims, and how many others there were."""
    more = f" +{o.shapes - 1} more" if o.shapes > 1 else ""
    return f"{o.name} {o.input_dims}{more}" if o.input_dims else o.name


def copy_rows(memcpy: dict[str, Copies]) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for direction, c in memcpy.items():
        issuer = ", ".join(f"{o.label} x{o.count}" for o in c.ops[:2])
        rows.append({**asdict(c), "dir": direction, "mb": c.bytes / 1e6, "issuer": issuer})
    return rows


def _syncs(doc: Doc, r: SummaryReport) -> None:
    s = r.sync
    calls = ", ".join(f"{c.name} x{c.count}" for c in s.calls) or "none"
    doc.heading(f"Synchronisations ({s.count}, host blocked {us(s.dur_ns)}; {_sync_kinds(s, 1)})")
    doc.line(calls)
    if s.ops:
        doc.line("from: " + "; ".join(f"{o.label} x{o.count}" for o in s.ops))
    st = r.steps
    if st:
        n = st.count
        copies = ", ".join(f"{k} {count(v.count / n)} ({size(v.bytes / n)})" for k, v in st.memcpy.items())
        doc.line(
            f"Per step ({n} steps): syncs {count(st.sync.count / n)} ({us(st.sync.dur_ns / n)}; "
            f"{_sync_kinds(st.sync, n)}); copies {copies or 'none'}"
        )


def _sync_kinds(s: object, n: int) -> str:
    kinds: list[tuple[str, SyncTally]] = [(w, getattr(s, k)) for k, w in SYNC_KINDS.items()]
    return ", ".join(f"{w} {count(t.count / n)}" for w, t in kinds)


# -- GPU metrics -------------------------------------------------------------------------------
METRIC_COLS = [
    Col("GPU", "device"),
    Col("SMs active %", "sm_active_pct", "pct"),
    Col("SM issue %", "sm_issue_pct", "pct"),
    Col("Warps in flight %", "warps_in_flight_pct", "pct"),
    Col("Tensor %", "tensor_active_pct", "pct", drop=1),
    Col("DRAM read %", "dram_read_pct", "pct", drop=2),
    Col("DRAM write %", "dram_write_pct", "pct", drop=3),
]


def _gpu_metrics(doc: Doc, r: SummaryReport) -> None:
    if not r.gpu_metrics:
        return
    doc.heading(f"GPU metrics, mean of the samples ({_scope_words(r.findings_scope, r.steps)})")
    doc.table([{"device": dev, **m} for dev, m in r.gpu_metrics.items()], METRIC_COLS)
