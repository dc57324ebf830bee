"""``traceconv ops`` as text: torch's ``key_averages().table()`` layout, CSV, JSON or Markdown.

The table is laid out as ``torch.autograd.profiler_util._build_table`` lays it out (column
widths, units, percentages of the self totals, the two total lines), so that it reads like
the table people know; traceconv's own view adds its CUDA API calls and a footer that says,
column by column, how it differs from torch's. CSV and JSON keep nanoseconds and bytes.
"""

from __future__ import annotations

import dataclasses
import math
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

from traceconv.analyses.key_averages.results import OpsDifference, OpsTable, OpStats
from traceconv.names import fit
from traceconv.render.columns import left_out
from traceconv.render.ops_columns import TORCH_NAMES
from traceconv.render.ops_layout import Layout, fitted
from traceconv.render.table import json_document

# --sort: our column names (torch's are in ops_columns.TORCH_NAMES)
SORT_KEYS: dict[str, Callable[[OpStats], float]] = {
    "self_cpu_ns": lambda r: r.self_cpu_ns,
    "cpu_total_ns": lambda r: r.cpu_total_ns,
    "self_gpu_ns": lambda r: r.self_gpu_ns,
    "gpu_total_ns": lambda r: r.gpu_total_ns,
    "cpu_mem_bytes": lambda r: r.cpu_mem_bytes,
    "self_cpu_mem_bytes": lambda r: r.self_cpu_mem_bytes,
    "gpu_mem_bytes": lambda r: r.gpu_mem_bytes,
    "self_gpu_mem_bytes": lambda r: r.self_gpu_mem_bytes,
    "calls": lambda r: r.calls,
    "cpu_time": lambda r: r.cpu_total_ns / r.calls if r.calls else 0.0,
    "cuda_time": lambda r: r.gpu_total_ns / r.calls if r.calls else 0.0,
}
CSV_COLUMNS = [f.name for f in dataclasses.fields(OpStats)]
_NAME_WIDTH, _SHAPES_WIDTH, _SRC_WIDTH, _WIDTH = 55, 80, 75, 12


def sort_key(name: str | None, result: OpsTable) -> str:
    """The column rows are sorted by: ``name`` (ours or torch's), else CUDA total when there is GPU time."""
    if name is None:
        return "gpu_total_ns" if any(r.gpu_total_ns for r in result.rows) else "cpu_total_ns"
    return TORCH_NAMES.get(name, name)


_US = {"self_cpu_ns": 0, "cpu_total_ns": 1, "self_gpu_ns": 2, "gpu_total_ns": 3}


@dataclasses.dataclass(frozen=True)
class Row:
    """A row with torch's float microseconds (self CPU, CPU total, self CUDA, CUDA total) when known."""

    stats: OpStats
    us: tuple[float, ...] | None = None

    def times(self) -> tuple[float, ...]:
        r = self.stats
        return self.us or (r.self_cpu_ns / 1e3, r.cpu_total_ns / 1e3, r.self_gpu_ns / 1e3, r.gpu_total_ns / 1e3)

    def value(self, key: str) -> float:
        if key in _US:
            return self.times()[_US[key]] * 1e3
        if key in ("cpu_time", "cuda_time"):
            total = self.times()[1 if key == "cpu_time" else 3]
            return 1.0 * total / self.stats.calls if self.stats.calls else 0.0
        return SORT_KEYS[key](self.stats)


def paired(rows: Sequence[OpStats], us: Sequence[tuple[float, ...]]) -> list[Row]:
    return [Row(r, us[i] if i < len(us) else None) for i, r in enumerate(rows)]


def ordered(rows: Sequence[Row], key: str, top: int) -> list[Row]:
    """Rows by ``key``, largest first (ties keep torch's order); the first ``top`` (0: all)."""
    out = sorted(rows, key=lambda r: r.value(key), reverse=True)
    return out[:top] if top else out


def ops_text(result: OpsTable, fmt: str, name: str, sort: str | None, top: int | None, width: int | None = None) -> str:
    """The output for stdout. ``top`` None: 25 rows in a table or Markdown, all in CSV and JSON. A table
    fits ``width`` columns (a terminal's); None: torch's layout, however wide."""
    key = sort_key(sort, result)
    limit = top if top is not None else (25 if fmt in ("table", "markdown") else 0)
    every = ordered(paired(result.rows, result.torch_us), key, 0)
    rows = every[:limit] if limit else every
    if fmt == "json":
        return json_document(_document(result, name, key, [r.stats for r in rows])) + "\n"
    if fmt == "csv":
        return _csv([r.stats for r in rows])
    if fmt == "markdown":
        return _markdown(result, name, key, rows, every)
    text = torch_table(result, rows, every, width)
    if result.view == "traceconv":
        text += _own_sections(result, limit, width)
    return text


def _row(r: OpStats) -> dict[str, Any]:
    out = dataclasses.asdict(r)
    for optional in ("input_shapes", "stack", "flops", "tflops", "pct_of_roof"):
        if out[optional] is None:
            del out[optional]
    return out


def _document(result: OpsTable, name: str, key: str, rows: list[OpStats]) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "input": name,
        "source": result.source,
        "view": result.view,
        "group_by": result.group_by,
        "sort": key,
        "self_cpu_total_ns": result.self_cpu_total_ns,
        "self_gpu_total_ns": result.self_gpu_total_ns,
        "rows": [_row(r) for r in rows],
    }
    if result.view == "traceconv":
        doc["runtime"] = [_row(r.stats) for r in ordered(paired(result.runtime, []), "cpu_total_ns", 0)]
        doc["differences"] = [dataclasses.asdict(d) for d in result.differences]
    if result.notes:
        doc["notes"] = result.notes
    return doc


def _csv(rows: list[OpStats]) -> str:
    import csv
    import io

    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for r in rows:
        values = dataclasses.asdict(r)
        values["stack"] = ";".join(r.stack) if r.stack is not None else None
        writer.writerow(["" if values[c] is None else values[c] for c in CSV_COLUMNS])
    return buf.getvalue()


# -- torch's table ------------------------------------------------------------------------------
def _time(ns: float) -> str:
    return _time_us(ns / 1000.0)


def _time_us(us: float) -> str:
    """torch's ``_format_time``."""
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    if us >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


def _share(ns: float, total: float) -> str:
    return "NaN" if total == 0 else f"{ns * 100.0 / total:.2f}%"


def _memory(n: int) -> str:
    kb, mb, gb = 1024, 1024**2, 1024**3
    if abs(n) >= gb:
        return f"{n / gb:.2f} GB"
    if abs(n) >= mb:
        return f"{n / mb:.2f} MB"
    if abs(n) >= kb:
        return f"{n / kb:.2f} KB"
    return f"{n} B"


_FLOPS = ["FLOPs", "KFLOPs", "MFLOPs", "GFLOPs", "TFLOPs", "PFLOPs"]


def _flops_scale(every: Sequence[Row]) -> tuple[float, str] | None:
    """torch's ``auto_scale_flops`` of the smallest positive FLOPs."""
    raw = [r.stats.flops for r in every if r.stats.flops]
    if not raw:
        return None
    log = max(0.0, min(math.log10(min(raw)) / 3, float(len(_FLOPS) - 1)))
    return pow(10, math.floor(log) * -3.0), _FLOPS[int(log)]


def _layout(result: OpsTable, shown: Sequence[Row], every: Sequence[Row]) -> Layout:
    """The columns as torch lays them out; widths from every row, not only those shown."""
    rows = [r.stats for r in every]
    device = any(r.times()[2] > 0 for r in every)
    device_mem = result.memory and any(r.self_gpu_mem_bytes > 0 for r in rows)
    shapes = any(r.input_shapes for r in rows)
    source = any(r.stack for r in rows)
    headers = ["Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg"]
    if device:
        headers += ["Self CUDA", "Self CUDA %", "CUDA total", "CUDA time avg"]
    if result.memory:
        headers += ["CPU Mem", "Self CPU Mem"] + (["CUDA Mem", "Self CUDA Mem"] if device_mem else [])
    headers.append("# of Calls")
    if result.view == "traceconv" and any(r.tflops is not None for r in rows):
        headers.append("TFLOP/s")  # traceconv's view: the roofline's achieved rate of the matrix work
    widths = [min(max((len(r.name) for r in rows), default=0) + 4, _NAME_WIDTH)] + [_WIDTH] * (len(headers) - 1)
    left = [False] * len(widths)
    src_width = min(max((len(e) for r in rows for e in (r.stack or [])), default=0) + 4, _SRC_WIDTH)
    if shapes:
        headers.append("Input Shapes")
        widths.append(min(max(len(str(r.input_shapes)) for r in rows) + 4, _SHAPES_WIDTH))
        left.append(False)
    if source:
        headers.append("Source Location")
        widths.append(src_width)
        left.append(True)
    flops = _flops_scale(every) if result.with_flops else None
    if flops:
        headers.append(f"Total {flops[1]}")
        widths.append(_WIDTH)
        left.append(False)
    return Layout(headers, widths, left, device, device_mem, shapes, source, src_width, flops)


def _totals(result: OpsTable, every: Sequence[Row]) -> tuple[float, float]:
    """torch's "Self CPU time total" and "Self CUDA time total", summed in the table's order (µs).

    torch's GPU total is that of its GPU rows (kernels, copies); traceconv's view has no GPU rows,
    and its operators' self GPU time (the work each launched itself) adds up to the same total.
    """
    own = result.view == "traceconv"
    cpu = gpu = 0.0
    for r in every:
        cpu += r.times()[0]
        if own or (r.stats.device == "cuda" and r.stats.kind != "annotation"):
            gpu += r.times()[2]
    return cpu, gpu


def torch_table(result: OpsTable, rows: Sequence[Row], every: Sequence[Row], width: int | None = None) -> str:
    """``rows`` as ``key_averages().table()`` prints them; percentages of the totals of ``every`` row;
    fitted to ``width`` columns where it is wider (:func:`ops_layout.fitted`)."""
    if not rows:
        return ""
    lay = _layout(result, rows, every)
    cpu_total, gpu_total = _totals(result, every)
    values = [_values(lay, r, cpu_total, gpu_total) for r in rows]
    if width is not None and len(lay.rule) > width:  # its lines end in two spaces, as torch prints them
        stacks = [[*[""] * (len(lay.headers) - 1), e] for r in rows for e in (r.stats.stack or [])]
        lay = fitted(lay, [*values, *stacks], width)
    out = [lay.rule, lay.line(lay.headers), lay.rule]
    for r, cells in zip(rows, _cut(lay, values), strict=True):
        out += _lines(lay, r, cells)
    out += [lay.rule, f"Self CPU time total: {_time_us(cpu_total)}"]
    if lay.device:
        out.append(f"Self CUDA time total: {_time_us(gpu_total)}")
    if width is not None:
        out += left_out(lay.left_out(), width)
    return "".join(line + "\n" for line in out)


def _cut(lay: Layout, values: list[list[str]]) -> list[list[str]]:
    """Names and input shapes cut to their columns: as torch cuts them, or where they differ (fitted)."""
    shapes = lay.headers.index("Input Shapes") if lay.shapes else None
    if lay.shown is None:
        for v in values:
            v[0] = v[0] if len(v[0]) < _NAME_WIDTH - 3 else v[0][: _NAME_WIDTH - 3] + "..."
            if shapes is not None:
                v[shapes] = v[shapes][: lay.widths[shapes]]
        return values
    for col in (0, shapes):
        if col is not None:
            for v, text in zip(values, fit([v[col] for v in values], lay.widths[col]), strict=True):
                v[col] = text
    return values


def _values(lay: Layout, row: Row, cpu_total: float, gpu_total: float) -> list[str]:
    """The cells of a row, before the Source Location (times and totals in µs; names and shapes whole)."""
    r = row.stats
    self_cpu, cpu, self_gpu, gpu = row.times()
    calls = r.calls or 1
    values = [r.name, _share(self_cpu, cpu_total), _time_us(self_cpu)]
    values += [_share(cpu, cpu_total), _time_us(cpu), _time_us(1.0 * cpu / calls)]
    if lay.device:
        values += [_time_us(self_gpu), _share(self_gpu, gpu_total), _time_us(gpu), _time_us(1.0 * gpu / calls)]
    if "CPU Mem" in lay.headers:
        values += [_memory(r.cpu_mem_bytes), _memory(r.self_cpu_mem_bytes)]
        if lay.device_mem:
            values += [_memory(r.gpu_mem_bytes), _memory(r.self_gpu_mem_bytes)]
    values.append(str(r.calls))
    if "TFLOP/s" in lay.headers:
        values.append(f"{r.tflops:,.1f}" if r.tflops is not None else "--")
    if lay.shapes:
        values.append(str(r.input_shapes))
    if lay.flops:  # torch puts this value before the Source Location, whose header comes first
        values.append(f"{r.flops * lay.flops[0]:8.3f}" if r.flops else "--")
    return values


def _lines(lay: Layout, r: Row, values: list[str]) -> list[str]:
    if not lay.source:
        return [lay.line(values)]
    stack = list(r.stats.stack or [])
    lines = [lay.line([*values, _trim(stack[0], lay.src_width) if stack else ""])]
    blank = [""] * (len(lay.headers) - 1)
    lines += [lay.line([*blank, _trim(entry, lay.src_width)]) for entry in stack[1:]]
    lines.append(lay.line([*blank, ""]))
    return lines


def _trim(path: str, width: int) -> str:
    if len(path) > width:
        path = path[len(path) - width :]
        if len(path) > 3:
            path = "..." + path[3:]
    return path


# -- traceconv's view ---------------------------------------------------------------------------
_LABELS = {
    "calls": "# of Calls",
    "self_cpu_ns": "Self CPU",
    "cpu_total_ns": "CPU total",
    "self_gpu_ns": "Self CUDA",
    "gpu_total_ns": "CUDA total",
    "cpu_mem_bytes": "CPU Mem",
    "gpu_mem_bytes": "CUDA Mem",
    "rows": "Rows",
    "annotations": "Annotations",
}


def _own_sections(result: OpsTable, limit: int, width: int | None) -> str:
    out = []
    if result.runtime:
        runtime = dataclasses.replace(result, rows=result.runtime, memory=False)
        every = ordered(paired(result.runtime, []), "cpu_total_ns", 0)
        calls = every[:limit] if limit else every
        out.append("\nCUDA API calls (torch nests them under their operator and subtracts them):\n")
        out.append(torch_table(runtime, calls, every, width).split("Self CPU time total")[0].rstrip("\n") + "\n")
    out.append("\nHow this differs from torch's key_averages() (traceconv ops --like torch):\n")
    for d in result.differences:
        out.append(textwrap.fill("  " + _difference(d) + ".", width or 100, subsequent_indent="    ") + "\n")
    return "".join(out)


def _difference(d: OpsDifference) -> str:
    label, ours, theirs = _LABELS.get(d.column, d.column), _amount(d.column, d.ours), _amount(d.column, d.torch)
    figures = f"{ours} here and in torch" if d.ours == d.torch else f"{ours} here, {theirs} in torch"
    return f"{label}: {figures}: {d.reason}"


def _amount(column: str, value: int) -> str:
    if column.endswith("_ns") or column == "annotations":
        return _time(value)
    if column.endswith("_bytes"):
        return _memory(value)
    return f"{value:,}"


def _markdown(result: OpsTable, name: str, key: str, rows: list[Row], every: list[Row]) -> str:
    view = "torch's key_averages()" if result.view == "torch" else "traceconv's view"
    lines = [f"# {name}: operators, {view}, by {key}", ""]
    if rows:
        lay = _layout(result, rows, every)
        cpu_total, gpu_total = _totals(result, every)
        headers = lay.headers
        lines.append("| " + " | ".join(headers) + " |")
        lines.append("|" + "|".join("---" if i == 0 or lay.left[i] else "---:" for i in range(len(headers))) + "|")
        for r, values in zip(rows, _cut(lay, [_values(lay, r, cpu_total, gpu_total) for r in rows]), strict=True):
            if lay.source:
                values.append("<br>".join(r.stats.stack or []))
            lines.append("| " + " | ".join(v.replace("|", "\\|") for v in values) + " |")
        lines += ["", f"Self CPU time total: {_time_us(cpu_total)}"]
        if lay.device:
            lines.append(f"Self CUDA time total: {_time_us(gpu_total)}")
    if result.differences:
        lines += ["", "## How this differs from torch's key_averages()", ""]
    lines += [f"- {_difference(d)}." for d in result.differences]
    return "\n".join(lines) + "\n"
