"""``summary`` and ``diff`` results as text: a terminal table, Markdown, or JSON. Returns strings; the CLI prints.

Everything here reads the JSON form (``summary.as_dict``, ``diff.as_dict``), so the three
formats cannot disagree. Terminal output fits ``width`` columns (100 by default): long
names are cut with an ellipsis and findings wrap.
"""

from __future__ import annotations

import json
import math
import re
import textwrap
from collections.abc import Sequence
from typing import Any

import pandas as pd

from traceconv.tables import FORMATS, Col, text_table

FORMATS_SUPPORTED = ("table", "json", "markdown")
TABLE_WIDTH = 100
_SHORT_LISTS = 5  # rows of the ranges and kernels tables in a terminal
_MIN_NAME = 12  # the name column shrinks to this before a table may exceed the width
SYNC_KINDS = {"result_waits": "result waits", "staging": "pageable staging"}  # keys of the sync JSON


def json_text(data: dict[str, Any]) -> str:
    return json.dumps(data, ensure_ascii=False, indent=1)


# -- building blocks -------------------------------------------------------------------------
class Doc:
    """Lines of a terminal table or Markdown document, built section by section."""

    def __init__(self, markdown: bool, width: int) -> None:
        self.markdown, self.width = markdown, width
        self.lines: list[str] = []

    def title(self, text: str) -> None:
        self.lines += [f"# {text}", ""] if self.markdown else [_fit(text, self.width)]

    def heading(self, text: str) -> None:
        self.lines += ["", f"## {text}" if self.markdown else f"{text}:"]
        if self.markdown:
            self.lines.append("")

    def line(self, text: str) -> None:
        if self.markdown:
            self.lines.append(f"- {text}")
        else:
            self.lines += textwrap.wrap(text, self.width, subsequent_indent="  ") or [""]

    def table(self, rows: Sequence[dict[str, Any]], cols: Sequence[Col]) -> None:
        if not rows:
            self.line("(none)")
            return
        df = pd.DataFrame(list(rows))
        for c in cols:
            if c.source not in df.columns:
                df[c.source] = None
        if self.markdown:
            self.lines += _md_table(df, cols)
        else:
            self.lines += text_table(df, cols, self.width, min_shrink=_MIN_NAME).splitlines()

    def findings(self, findings: Sequence[dict[str, Any]]) -> None:
        if not findings:
            self.line("none above the thresholds")
            return
        for f in findings:
            head = f"{f['severity'].upper()} {f['code']}"
            if self.markdown:
                self.lines.append(f"- **{head}**: {f['message']}")
            else:
                self.lines += textwrap.wrap(f"{head}: {f['message']}", self.width, subsequent_indent="    ")

    def text(self) -> str:
        return "\n".join(self.lines).rstrip() + "\n"


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else "…" + text[len(text) - width + 1 :]


def _md_table(df: pd.DataFrame, cols: Sequence[Col]) -> list[str]:
    out = [
        "| " + " | ".join(c.header for c in cols) + " |",
        "|" + "|".join("---" if c.fmt == "text" else "---:" for c in cols) + "|",
    ]
    for _, row in df.iterrows():
        cells = [_cell(row[c.source], c).replace("|", "\\|") for c in cols]
        out.append("| " + " | ".join(cells) + " |")
    return out


def _cell(v: Any, col: Col) -> str:
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return col.null
    return FORMATS[col.fmt](v)


def ms(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:,.2f} ms"


def us(ns: float | None) -> str:
    """Microseconds, or milliseconds from 1 ms on."""
    return "-" if ns is None else f"{ns / 1e3:,.1f} µs" if ns < 1e6 else ms(ns)


def mb(n: float | None) -> str:
    return "-" if n is None else f"{n / 1e6:,.1f} MB"


_NOISE = re.compile(r"^void |at::native::|at::cuda::|\(anonymous namespace\)::|cutlass::|<unnamed>::")


def kernel_label(name: str) -> str:
    """A kernel's name for a narrow column: no ``void``, common namespaces or parameter list (JSON keeps it whole)."""
    text = _NOISE.sub("", name)
    depth = 0
    for i, ch in enumerate(text):  # cut the parameter list: the first "(" outside template brackets
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "(" and depth == 0 and i > 0:
            return text[:i]
    return text


def signed(text: str, value: float) -> str:
    return ("+" if value > 0 else "") + text


# -- summary ---------------------------------------------------------------------------------
OP_COLS = [
    Col("GPU self ms", "gpu_self_ns", "ms"),
    Col("GPU total ms", "gpu_total_ns", "ms"),
    Col("CPU ms", "cpu_total_ns", "ms"),
    Col("CPU self ms", "cpu_self_ns", "ms"),
    Col("Calls", "calls", "int"),
    Col("Operator [input dims]", "label", shrink=True),
]
RANGE_COLS = [
    Col("GPU ms", "gpu_ns", "ms"),
    Col("Time ms", "dur_ns", "ms"),
    Col("Count", "count", "int"),
    Col("Range", "name", shrink=True),
]
KERNEL_COLS = [
    Col("Time %", "time_pct", "pct"),
    Col("Exec ms", "dur_ns", "ms"),
    Col("Count", "count", "int"),
    Col("Avg µs", "avg_ns", "us"),
    Col("Queue avg µs", "queue_avg_ns", "us"),
    Col("Occ %", "occupancy_pct", "pct"),
    Col("Kernel", "label", shrink=True),
]
COPY_COLS = [
    Col("Dir", "dir"),
    Col("Count", "count", "int"),
    Col("MB", "mb", "pct"),
    Col("ms", "dur_ns", "ms"),
    Col("GB/s", "bandwidth_gbps", "pct"),
    Col("GPU %", "gpu_time_pct", "pct"),
    Col("Pageable", "pageable_count", "int"),
    Col("Pinned", "pinned_count", "int"),
    Col("Issued by", "issuer", shrink=True),
]


def summary_text(d: dict[str, Any], fmt: str, title: str, width: int = TABLE_WIDTH) -> str:
    """The summary as a terminal table (``table``) or Markdown (``markdown``)."""
    if fmt == "json":
        return json_text(d) + "\n"
    doc = Doc(fmt == "markdown", width)
    doc.title(f"{title} ({d['source']})")
    _overview(doc, d)
    doc.heading(f"Findings ({_scope_words(d['findings_scope'], d['steps'])})")
    doc.findings(d["findings"])
    doc.heading("Top operators by self GPU time")
    doc.table([{**o, "label": _with_dims(o)} for o in d["top_ops"]], OP_COLS)
    short = None if doc.markdown else _SHORT_LISTS
    doc.heading("Host annotations and NVTX ranges (GPU time launched inside, on the same thread)")
    doc.table(d["nvtx"][:short], RANGE_COLS)
    doc.heading("Top kernels by execution time (queue: launch call's end to kernel start)")
    doc.table(
        [{**k, "label": k.get("short_name") or kernel_label(k["name"])} for k in d["top_kernels"][:short]], KERNEL_COLS
    )
    doc.heading("Copies")
    doc.table(copy_rows(d["memcpy"]), COPY_COLS)
    _syncs(doc, d)
    _memory(doc, d["memory"])
    return doc.text()


def _scope_words(scope: str, steps: dict[str, Any] | None) -> str:
    if scope == "steps" and steps:
        return f"measured on the {steps['count']} steps {steps['label']}"
    return "measured on the whole window"


def _overview(doc: Doc, d: dict[str, Any]) -> None:
    s = d["steps"]
    span = f"Profiled window {ms(d['window_ns'])}"
    if s:
        span += (
            f"; {s['count']} steps {s['label']}: avg {ms(s['avg_ns'])} (min {ms(s['min_ns'])}, max {ms(s['max_ns'])})"
        )
    doc.line(span)
    for dev, g in d["gpu"].items():
        pct = g["busy_ns"] * 100.0 / g["window_ns"] if g["window_ns"] else 0.0
        extra = ""
        if s and dev in s["gpu"] and s["gpu"][dev]["window_ns"]:
            extra = f"; in steps busy {s['gpu'][dev]['busy_ns'] * 100.0 / s['gpu'][dev]['window_ns']:.1f}%"
        doc.line(f"GPU {dev}: busy {ms(g['busy_ns'])} ({pct:.1f}%), idle {ms(g['idle_ns'])}{extra}")
    b = d["bound"]
    api = b.get("idle_in_api_pct")
    why = f"; host inside CUDA calls {api:.0f}% of the GPU idle time" if api is not None else ""
    doc.line(f"Verdict: {b['verdict']} (GPU busy {b['gpu_busy_pct']:.1f}% of the {b['scope']}{why})")


def _with_dims(o: dict[str, Any]) -> str:
    dims = o.get("input_dims")
    more = f" +{o['shapes'] - 1} more" if o.get("shapes", 0) > 1 else ""
    return f"{o['name']} {dims}{more}" if dims else o["name"]


def op_label(o: dict[str, Any]) -> str:
    """An operator of a copy or sync, with the annotation around it."""
    return str(o["name"]) + (f" in {o['region']}" if o.get("region") else "")


def copy_rows(memcpy: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for direction, c in memcpy.items():
        ops = c.get("ops") or []
        issuer = ", ".join(f"{op_label(o)} x{o['count']}" for o in ops[:2])
        rows.append({**c, "dir": direction, "mb": c["bytes"] / 1e6, "issuer": issuer})
    return rows


def _syncs(doc: Doc, d: dict[str, Any]) -> None:
    s = d["sync"]
    calls = ", ".join(f"{c['name']} x{c['count']}" for c in s["calls"]) or "none"
    doc.heading(f"Synchronisations ({s['count']}, host blocked {us(s['dur_ns'])}; {_sync_kinds(s, 1)})")
    doc.line(calls)
    if s["ops"]:
        doc.line("from: " + "; ".join(f"{op_label(o)} x{o['count']}" for o in s["ops"]))
    st = d["steps"]
    if st:
        n = st["count"]
        copies = ", ".join(f"{k} {v['count'] / n:.1f} ({mb(v['bytes'] / n)})" for k, v in st["memcpy"].items())
        doc.line(
            f"Per step ({n} steps): syncs {st['sync']['count'] / n:.1f} ({us(st['sync']['dur_ns'] / n)}; "
            f"{_sync_kinds(st['sync'], n)}); copies {copies or 'none'}"
        )


def _sync_kinds(s: dict[str, Any], n: int) -> str:
    return ", ".join(f"{w} {s[k]['count'] / n:g}" for k, w in SYNC_KINDS.items())


def _memory(doc: Doc, memory: dict[str, dict[str, int]]) -> None:
    if not memory:
        return
    parts = [
        f"{'GPU ' + dev if dev != 'cpu' else 'host'}: allocated {mb(m['allocated_peak_bytes'])}"
        + (f", reserved {mb(m['reserved_peak_bytes'])}" if m["reserved_peak_bytes"] else "")
        for dev, m in memory.items()
    ]
    doc.heading("Memory peaks")
    if doc.markdown:
        doc.line("; ".join(parts))
    else:
        doc.lines[-1] += " " + "; ".join(parts)


# -- diff ------------------------------------------------------------------------------------
DELTA_OP_COLS = [
    Col("ΔGPU self ms", "gpu_self_ns", "ms"),
    Col("ΔCPU self ms", "cpu_self_ns", "ms"),
    Col("GPU before", "b_gpu", "ms"),
    Col("after", "a_gpu", "ms"),
    Col("Calls", "b_calls", "pct"),
    Col("after", "a_calls", "pct"),
    Col("Status", "status"),
    Col("Operator", "name", shrink=True),
]
DELTA_KERNEL_COLS = [
    Col("Δ Exec ms", "dur_ns", "ms"),
    Col("Exec before", "b_dur", "ms"),
    Col("after", "a_dur", "ms"),
    Col("Count before", "b_count", "pct"),
    Col("after", "a_count", "pct"),
    Col("Status", "status"),
    Col("Kernel", "name", shrink=True),
]
DELTA_COPY_COLS = [
    Col("Dir", "dir"),
    Col("Count before", "b_count", "pct"),
    Col("after", "a_count", "pct"),
    Col("MB before", "b_mb", "pct"),
    Col("after", "a_mb", "pct"),
    Col("ms before", "b_dur", "ms"),
    Col("after", "a_dur", "ms"),
    Col("Status", "status"),
]
DELTA_SYNC_COLS = [
    Col("Kind", "kind"),
    Col("Before", "before", "pct"),
    Col("After", "after", "pct"),
    Col("Status", "status"),
    Col("Caused by", "label", shrink=True),
]


def diff_text(d: dict[str, Any], fmt: str, before: str, after: str, width: int = TABLE_WIDTH) -> str:
    """The diff as a terminal table or Markdown; all figures per step (or per window, see the note)."""
    if fmt == "json":
        return json_text(d) + "\n"
    b, a, delta = d["before"], d["after"], d["delta"]
    doc = Doc(fmt == "markdown", width)
    unit = "step" if d["scope"] == "steps" else "window"
    doc.title(f"{before} -> {after}, per {unit}")
    if d["note"]:
        doc.line(f"Note: {d['note']}")
    if d["scope"] == "steps":
        doc.line(f"Steps: {b['steps']} {b['label']} -> {a['steps']} {a['label']}")
    change = f", {delta['step_ns'] * 100.0 / b['step_ns']:+.1f}%" if b["step_ns"] else ""
    doc.line(
        f"{unit.capitalize()} time: {ms(b['step_ns'])} -> {ms(a['step_ns'])} "
        f"({signed(ms(delta['step_ns']), delta['step_ns'])}{change})"
    )
    doc.line(
        f"GPU time per {unit}: {ms(b['gpu_time_ns'])} -> {ms(a['gpu_time_ns'])}; verdict "
        f"{b['bound']['verdict']} ({b['bound']['gpu_busy_pct']:.1f}% busy) -> "
        f"{a['bound']['verdict']} ({a['bound']['gpu_busy_pct']:.1f}% busy)"
    )
    _diff_findings(doc, delta["findings"])
    doc.heading(f"Copies per {unit}")
    doc.table(_copy_delta_rows(b["memcpy"], a["memcpy"], delta["memcpy"]), DELTA_COPY_COLS)
    doc.heading(
        f"Synchronisations per {unit}: {b['sync']['count']:g} -> {a['sync']['count']:g} "
        f"({us(b['sync']['dur_ns'])} -> {us(a['sync']['dur_ns'])} blocked)"
    )
    doc.line(", ".join(f"{w} {b['sync'][k]['count']:g} -> {a['sync'][k]['count']:g}" for k, w in SYNC_KINDS.items()))
    rows = [{**o, "kind": w, "label": op_label(o)} for k, w in SYNC_KINDS.items() for o in delta["sync"][k]["ops"]]
    doc.table(rows, DELTA_SYNC_COLS)
    doc.heading(f"Operators per {unit}, biggest change first")
    doc.table([_flat(o, "gpu_self_ns", "calls", "gpu", "calls") for o in delta["top_ops"]], DELTA_OP_COLS)
    doc.heading(f"Kernels per {unit}, biggest change first")
    short = None if doc.markdown else _SHORT_LISTS
    doc.table(
        [
            {**_flat(k, "dur_ns", "count", "dur", "count"), "name": kernel_label(k["name"])}
            for k in delta["top_kernels"][:short]
        ],
        DELTA_KERNEL_COLS,
    )
    return doc.text()


def _diff_findings(doc: Doc, f: dict[str, Any]) -> None:
    doc.heading("Findings")
    doc.line("gone: " + (", ".join(f["gone"]) or "none"))
    doc.line("new: " + (", ".join(f["new"]) or "none"))
    kept = "; ".join(
        f"{k['code']} {k['before']:g} -> {k['after']:g} ({k['severity'][0]} -> {k['severity'][1]})" for k in f["kept"]
    )
    doc.line("still there: " + (kept or "none"))


def _copy_delta_rows(b: dict[str, Any], a: dict[str, Any], delta: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    zero = {"count": 0, "bytes": 0, "dur_ns": 0}
    for direction, dd in delta.items():
        x, y = b.get(direction, zero), a.get(direction, zero)
        rows.append(
            {
                "dir": direction,
                "status": dd["status"],
                "b_count": x["count"],
                "a_count": y["count"],
                "b_mb": x["bytes"] / 1e6,
                "a_mb": y["bytes"] / 1e6,
                "b_dur": x["dur_ns"],
                "a_dur": y["dur_ns"],
            }
        )
    return rows


def _flat(item: dict[str, Any], time_key: str, count_key: str, time_col: str, count_col: str) -> dict[str, Any]:
    return {
        **item,
        f"b_{time_col}": item["before"][time_key],
        f"a_{time_col}": item["after"][time_key],
        f"b_{count_col}": item["before"][count_key],
        f"a_{count_col}": item["after"][count_key],
    }
