"""The report's charts as Vega-Lite specifications: plain JSON, data inline (already aggregated).

Every chart has a title, axis titles with their units and tooltips. Each function returns None
when the input has nothing to draw (no copies, no allocator events, no GPU metrics ...), and the
page then says so instead of showing an empty chart.
"""

from __future__ import annotations

from typing import Any

from traceconv.analyses.results import CriticalPath, KernelRow, MemoryPeak, OpRow
from traceconv.analyses.roofline import Roofline
from traceconv.analyses.roofline.peaks import Peaks
from traceconv.analyses.timeline import CLASSES, Breakdown, Histogram, Series, Timeline
from traceconv.names import kernel_label, shorten
from traceconv.render.path import PART_WORDS

Spec = dict[str, Any]
COLOURS = {"compute": "#4c78a8", "communication": "#f58518", "copies": "#54a24b", "idle": "#bab0ac"}
NAME_WIDTH = 70


def _chart(title: str, data: list[dict[str, Any]], **spec: Any) -> Spec:
    return {
        "$schema": "https://vega.github.io/schema/vega-lite/v6.json",
        "title": {"text": title, "anchor": "start"},
        "width": "container",
        "autosize": {"type": "fit-x", "contains": "padding"},
        "data": {"values": data},
        **spec,
    }


def _q(field: str, title: str, **more: Any) -> dict[str, Any]:
    return {"field": field, "type": "quantitative", "title": title, **more}


def _n(field: str, title: str, **more: Any) -> dict[str, Any]:
    return {"field": field, "type": "nominal", "title": title, **more}


def breakdown(parts: list[Breakdown], scope: str) -> Spec | None:
    """Stacked bars, one per lane: compute, communication, copies and idle in ms per step."""
    if not parts:
        return None
    rows = []
    for b in parts:
        per = max(b.steps, 1)
        values = {"compute": b.compute_ns, "communication": b.communication_ns, "copies": b.copies_ns}
        for cls in (*CLASSES, "idle"):
            ns = values.get(cls, b.idle_ns)
            pct = ns * 100.0 / b.window_ns if b.window_ns else 0.0
            rows.append({"lane": b.label, "part": cls, "ms": round(ns / per / 1e6, 4), "pct": round(pct, 1)})
    unit = "ms per step" if scope == "steps" else "ms in the profiled window"
    return _chart(
        f"Step time by what the GPU did ({unit})",
        rows,
        height=30 * len(parts),
        mark={"type": "bar", "tooltip": True},
        encoding={
            "y": _n("lane", "GPU"),
            "x": _q("ms", unit, stack="zero"),
            "color": _n("part", "", scale={"domain": list(COLOURS), "range": list(COLOURS.values())}),
            "order": {"field": "order"},
            "tooltip": [_n("lane", "GPU"), _n("part", "part"), _q("ms", unit), _q("pct", "% of the time")],
        },
        transform=[{"calculate": f"indexof({list(COLOURS)}, datum.part)", "as": "order"}],
    )


PATH_COLOURS = {
    "gpu_compute": "#4c78a8",
    "gpu_communication": "#f58518",
    "gpu_copies": "#54a24b",
    "sync_wait": "#e45756",
    "launch": "#eeca3b",
    "host_ops": "#b279a2",
    "host_other": "#ff9da6",
    "gpu_wait": "#9d755d",
}


def critical_path(p: CriticalPath | None) -> Spec | None:
    """One stacked bar: the median step's time by what it waited for (the parts sum to the step)."""
    if p is None:
        return None
    rows = [
        {"part": PART_WORDS[k], "key": k, "ms": round(v / 1e6, 4), "pct": round(v * 100.0 / p.step_ns, 1)}
        for k, v in p.parts.items()
        if v and p.step_ns
    ]
    words = [PART_WORDS[k] for k in PATH_COLOURS]
    return _chart(
        f"Critical path of the median step ({p.step_ns / 1e6:,.2f} ms): what the step waited for",
        rows,
        height=40,
        mark={"type": "bar", "tooltip": True},
        encoding={
            "x": _q("ms", "ms of the step", stack="zero"),
            "color": _n("part", "", scale={"domain": words, "range": list(PATH_COLOURS.values())}),
            "order": {"field": "order"},
            "tooltip": [_n("part", "part"), _q("ms", "ms"), _q("pct", "% of the step")],
        },
        transform=[{"calculate": f"indexof({words}, datum.part)", "as": "order"}],
    )


def steps(parts: list[Breakdown]) -> Spec | None:
    """Stacked bars, one per step (and GPU, side by side): each step's time by class."""
    if not parts:
        return None
    several = len({b.label for b in parts}) > 1
    rows = []
    for b in parts:
        values = {"compute": b.compute_ns, "communication": b.communication_ns, "copies": b.copies_ns}
        for cls in (*CLASSES, "idle"):
            ns = values.get(cls, b.idle_ns)
            rows.append({"step": b.step, "lane": b.label, "part": cls, "ms": round(ns / 1e6, 4)})
    encoding: dict[str, Any] = {
        "x": {
            "field": "step",
            "type": "ordinal",
            "title": "step (in time order, warm-up left out)",
            # at most ~25 labels however many steps (hundreds of labels smear into one another)
            "axis": {
                "labelAngle": 0,
                "labelOverlap": "greedy",
                "values": _every(sorted({b.step for b in parts if b.step is not None})),
            },
        },
        "y": _q("ms", "ms", stack="zero"),
        "color": _n("part", "", scale={"domain": list(COLOURS), "range": list(COLOURS.values())}),
        "order": {"field": "order"},
        "tooltip": [_n("lane", "GPU"), {"field": "step", "type": "ordinal"}, _n("part", ""), _q("ms", "ms")],
    }
    if several:
        encoding["xOffset"] = _n("lane", "GPU")
    return _chart(
        "Each step by what the GPU did" + (" (the GPUs side by side)" if several else ""),
        rows,
        height=220,
        mark={"type": "bar", "tooltip": True},
        encoding=encoding,
        transform=[{"calculate": f"indexof({list(COLOURS)}, datum.part)", "as": "order"}],
    )


STEP_LABELS = 25


def _every(steps: list[int]) -> list[int]:
    """The step labels to show: all of a few steps, every k-th of many."""
    k = max(1, -(-len(steps) // STEP_LABELS))
    return steps[::k]


def _over_time(title: str, t: Timeline, lines: list[Series], y_title: str, colour: str) -> Spec | None:
    if not lines:
        return None
    xs = t.x_ms
    rows = [{"t": x, "v": v, colour: s.name} for s in lines for x, v in zip(xs, s.y, strict=True) if v is not None]
    bucket = f"{t.bucket_ns / 1e6:.3g} ms buckets"
    return _chart(
        title,
        rows,
        height=220,
        mark={"type": "line", "tooltip": True, "interpolate": "step-after", "strokeWidth": 1.2},
        encoding={
            "x": _q("t", f"time since the first event (ms; {bucket})"),
            "y": _q("v", y_title),
            "color": _n(colour, "", legend={"labelLimit": 360}),
            "tooltip": [_n(colour, ""), _q("t", "ms", format=".3f"), _q("v", y_title, format=".2f")],
        },
    )


def utilisation(t: Timeline) -> Spec | None:
    return _over_time("GPU utilisation over time (busy share of each bucket)", t, t.utilisation, "busy (%)", "GPU")


def copies(t: Timeline) -> Spec | None:
    return _over_time("Copies over time by direction", t, t.copies, "throughput (GB/s)", "direction")


def metrics(t: Timeline) -> Spec | None:
    return _over_time("SM activity and other GPU metrics (Nsight Systems samples)", t, t.metrics, "%", "metric")


def memory(t: Timeline, peaks_of: dict[str, MemoryPeak]) -> Spec | None:
    """The allocator's totals over time, with each device's peak (the summary's) marked."""
    spec = _over_time("Memory over time (allocator totals)", t, t.memory, "MB", "series")
    if spec is None:
        return None
    peaks = [
        {
            "t": round((m.peak_ns - t.start_ns) / 1e6, 6),
            "v": round(m.allocated_peak_bytes / 1e6, 2),
            "peak": f"{'host' if dev == 'cpu' else 'GPU ' + dev} peak",
        }
        for dev, m in peaks_of.items()
        if m.peak_ns is not None
    ]
    line = {k: spec.pop(k) for k in ("mark", "encoding")}
    marker = {
        "data": {"values": peaks},
        "mark": {"type": "point", "shape": "triangle-down", "size": 120, "filled": True, "color": "#e45756"},
        "encoding": {
            "x": {"field": "t", "type": "quantitative"},
            "y": {"field": "v", "type": "quantitative"},
            "tooltip": [_n("peak", ""), _q("v", "MB", format=".1f"), _q("t", "ms", format=".3f")],
        },
    }
    spec["layer"] = [line, marker]
    return spec


def _bars(title: str, rows: list[dict[str, Any]], x_title: str, kinds: dict[str, str]) -> Spec | None:
    if not rows:
        return None
    return _chart(
        title,
        rows,
        height=24 * len(rows),
        transform=[{"fold": list(kinds), "as": ["measure", "ms"]}],
        mark={"type": "bar", "tooltip": True},
        encoding={
            "y": _n("name", "", sort={"field": "order"}, axis={"labelLimit": 420}),
            "yOffset": _n("measure", ""),
            "x": _q("ms", x_title),
            "color": _n("measure", "", scale={"domain": list(kinds), "range": list(kinds.values())}),
            "tooltip": [_n("full", "name"), _n("measure", ""), _q("ms", x_title, format=".3f")],
        },
    )


def top_ops(ops: list[OpRow], per: int) -> Spec | None:
    rows = [
        {
            "name": shorten(o.name, NAME_WIDTH),
            "full": o.name,
            "order": k,
            "self": round(o.gpu_self_ns / per / 1e6, 4),
            "total": round(o.gpu_total_ns / per / 1e6, 4),
        }
        for k, o in enumerate(ops)
    ]
    return _bars(
        "Top operators by GPU time (self: launched by the op itself; total: anywhere inside it)",
        rows,
        "GPU time (ms)",
        {"self": "#4c78a8", "total": "#9ecae9"},
    )


def top_kernels(kernels: list[KernelRow], per: int) -> Spec | None:
    rows = [
        {
            "name": shorten(kernel_label(k.name), NAME_WIDTH),
            "full": k.name,
            "order": i,
            "execution": round(k.dur_ns / per / 1e6, 4),
            "queue": round(k.queue_ns / per / 1e6, 4),
        }
        for i, k in enumerate(kernels)
    ]
    return _bars(
        "Top kernels: execution time, and time spent queued after the launch call returned",
        rows,
        "summed time (ms)",
        {"execution": "#4c78a8", "queue": "#f58518"},
    )


def histogram(h: Histogram) -> Spec | None:
    if not h.counts:
        return None
    rows = [
        {"lo": lo, "hi": round(lo * 10**0.1, 1), "n": n, "us": round(lo / 1e3, 3)}
        for lo, n in zip(h.lo_ns, h.counts, strict=True)
    ]
    return _chart(
        f"Kernel {h.name} times (count per tenth of a decade)",
        rows,
        height=200,
        mark={"type": "rect", "tooltip": True, "color": "#4c78a8" if h.name == "execution" else "#f58518"},
        encoding={
            "x": _q("lo", f"{h.name} time (ns, log scale)", scale={"type": "log"}),
            "x2": {"field": "hi"},
            "y": _q("n", "kernels"),
            "y2": {"datum": 0},
            "tooltip": [_q("lo", "from ns"), _q("hi", "to ns"), _q("n", "kernels")],
        },
    )


def diff_kernels(rows: list[dict[str, Any]], scope: str) -> Spec | None:
    """Before and after, per kernel (per step when both runs mark steps)."""
    data = [
        {
            "name": shorten(kernel_label(str(r["name"])), NAME_WIDTH),
            "full": str(r["name"]),
            "order": i,
            "before": round(float(r["before"]["dur_ns"]) / 1e6, 4),
            "after": round(float(r["after"]["dur_ns"]) / 1e6, 4),
        }
        for i, r in enumerate(rows)
    ]
    unit = "ms per step" if scope == "steps" else "ms"
    return _bars(
        "Kernels before and after (biggest change first)", data, unit, {"before": "#bab0ac", "after": "#4c78a8"}
    )


# The compute roofs drawn: the CUDA cores' fp32 and the tensor cores' TF32 and bf16 (where the GPU has them).
ROOFS = (("fp32", "fp32 (CUDA cores)"), ("tf32", "TF32 (tensor cores)"), ("bf16", "bf16 (tensor cores)"))
ROOF_COLOURS = ("#e45756", "#72b7b2", "#54a24b")
CORE_COLOURS = {"cuda": "#e45756", "tensor": "#4c78a8", "mixed": "#b279a2", "unknown": "#9d755d"}


def _roof_lines(peaks: Peaks | None, lo: float, hi: float) -> list[dict[str, Any]]:
    """Each compute roof of :data:`ROOFS` as a line: the memory roof up to its ridge point, then flat."""
    if peaks is None or not peaks.bandwidth_gbps:
        return []
    bandwidth = peaks.bandwidth_gbps
    out = []
    for key, label in ROOFS:
        peak = peaks.cuda(key) if key == "fp32" else peaks.tensor(key)
        if peak:
            ridge = peak * 1e3 / bandwidth
            for x in (min(lo, ridge / 4), ridge, max(hi, ridge * 4)):
                out.append({"intensity": x, "tflops": min(peak, x * bandwidth / 1e3), "roof": label})
    return out


def roofline(r: Roofline | None) -> Spec | None:
    """The operators as points (arithmetic intensity, achieved TFLOP/s) under the GPU's roofs: the memory
    roof (bandwidth x intensity) up to each compute roof, log-log."""
    points = [o for o in (r.ops if r else []) if o.intensity and o.tflops]
    if r is None or not points:
        return None
    lo = min(o.intensity or 1.0 for o in points) / 4
    hi = max(o.intensity or 1.0 for o in points) * 4
    lines = _roof_lines(r.device.peaks, lo, hi)
    ops = [
        {
            "name": shorten(o.name, NAME_WIDTH),
            "intensity": o.intensity,
            "tflops": o.tflops,
            "ms": round(o.gpu_ns / 1e6, 3),
            "engine": o.engine or "unknown",
            "dtype": o.dtype or "",
            "pct": o.pct_of_roof,
            "bound": o.bound or "",
        }
        for o in points
    ]
    x = _q("intensity", "arithmetic intensity (FLOP per byte of least traffic, log)", scale={"type": "log"})
    y = _q("tflops", "achieved TFLOP/s (log)", scale={"type": "log"})
    spec = _chart(
        f"Roofline of the operators ({r.device.model or r.device.name or 'GPU of unknown peaks'})",
        ops,
        height=320,
    )
    del spec["data"]
    roof = {
        "data": {"values": lines},
        "mark": {"type": "line", "strokeDash": [4, 3]},
        "encoding": {
            "x": x,
            "y": y,
            "color": _n("roof", "roof", scale={"domain": [r[1] for r in ROOFS], "range": list(ROOF_COLOURS)}),
        },
    }
    dots = {
        "data": {"values": ops},
        "mark": {"type": "circle", "tooltip": True, "opacity": 0.8},
        "encoding": {
            "x": x,
            "y": y,
            "size": _q("ms", "GPU time (ms)"),
            "color": _n("engine", "cores", scale={"domain": list(CORE_COLOURS), "range": list(CORE_COLOURS.values())}),
            "tooltip": [
                _n("name", "operator"),
                _q("tflops", "TFLOP/s"),
                _q("intensity", "FLOP/byte"),
                _q("ms", "GPU ms"),
                _n("dtype", "type"),
                _q("pct", "% of its roof"),
                _n("bound", "bound"),
            ],
        },
    }
    spec["layer"] = [roof, dots] if lines else [dots]
    spec["resolve"] = {"scale": {"color": "independent"}}
    return spec
