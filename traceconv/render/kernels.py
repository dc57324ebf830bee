"""``traceconv kernels`` as text: a terminal table, CSV or JSON, from one :class:`KernelReport`.

Tables show ms and µs; CSV and JSON keep nanoseconds. A note about GPU rows with no
launching call goes beside CSV (to stderr), into the footer of a table, and into JSON's totals.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from traceconv.analyses.kernels import KernelReport
from traceconv.names import kernel_label
from traceconv.render.columns import Col
from traceconv.render.table import csv_text, json_text, text_table


def kernel_summary_cols(keys: Sequence[str]) -> list[Col]:
    """Terminal columns for :func:`traceconv.analyses.kernels.summary`; the key columns go last.

    Minima and the spread of queue, API and wall times are left to CSV and JSON: a row
    must fit a terminal with room for the kernel's name.
    """
    cols = [
        Col("Time (%)", "time_pct", "pct"),
        Col("Total (ms)", "exec_total_ns", "ms"),
        Col("Count", "count", "int"),
        Col("Avg (µs)", "exec_avg_ns", "us"),
        Col("Med (µs)", "exec_med_ns", "us", drop=5),
        Col("Max (µs)", "exec_max_ns", "us", drop=4),
        Col("StdDev (µs)", "exec_std_ns", "us", drop=8),
        Col("Avg queue (µs)", "queue_avg_ns", "us", drop=3),
        Col("Avg API (µs)", "api_avg_ns", "us", drop=6),
        Col("Avg wall (µs)", "wall_avg_ns", "us", drop=7),
        Col("No launch", "no_launch", "int", drop=2),  # the footer counts them too
    ]
    for key in keys:
        cols.append(_KEY_COLS[key])
    return cols


# Per kernel name, where the roofline was measured (``kernels.with_roofline``).
ROOF_COLS = [
    Col("Cores", "engine", null="", drop=1),
    Col("TFLOP/s", "tflops", "pct", null="", drop=1),
    Col("% roof", "pct_of_roof", "pct", null="", drop=9),
]
_KEY_COLS = {
    "name": Col("Name", "name", shrink=True),
    "launch_name": Col("Launch API", "launch_name", null="(no launching call)"),
    "op_name": Col("Operator", "op_name", shrink=True, null="(no operator)"),
    "pid": Col("PID", "pid", "id"),
    "tid": Col("TID", "tid", "id"),
    "device": Col("Dev", "device", "id"),
}

PER_LAUNCH_COLS = [
    Col("API Start (ms)", "api_start_ns", "ms", drop=4),
    Col("API (µs)", "api_dur_ns", "us"),
    Col("Queue (µs)", "queue_dur_ns", "us"),
    Col("Kernel Start (ms)", "kernel_start_ns", "ms"),
    Col("Kernel (µs)", "kernel_dur_ns", "us"),
    Col("Total (µs)", "total_dur_ns", "us", drop=3),
    Col("PID", "pid", "id", drop=7),
    Col("TID", "tid", "id", drop=6),
    Col("Dev", "device", "id", drop=2),
    Col("Stream", "stream", "id", drop=1),
    Col("API Function", "launch_name", null="(none in trace)", drop=5),
    Col("Kernel Name", "name", shrink=True),
]


def from_first_start(rows: pd.DataFrame) -> tuple[pd.DataFrame, int | None]:
    """A copy of per-launch rows with start times made relative to the earliest one (for display)."""
    starts = [c for c in ("api_start_ns", "queue_start_ns", "kernel_start_ns") if c in rows.columns]
    lows = [rows[c].min() for c in starts]
    known = [int(v) for v in lows if v is not pd.NA and not pd.isna(v)]
    if not known:
        return rows, None
    origin = min(known)
    out = rows.copy()
    for c in starts:
        out[c] = out[c] - origin
    return out, origin


def kernels_text(r: KernelReport, fmt: str, trace: Path, width: int) -> tuple[str, str | None]:
    """The output (for stdout) and a note for stderr, if any."""
    what = "/".join(r.kinds)
    if fmt == "csv":
        n, total = r.totals.no_launch, r.totals.rows
        note = (
            f"{n:,} of {total:,} {what} rows {_have(n)} no launching call in the trace; kept, with empty API, "
            "queue and wall times"
            if n
            else None
        )
        return csv_text(r.rows), note
    if fmt == "json":
        meta = {
            "input": str(trace),
            "kinds": list(r.kinds),
            "by": r.by,
            "totals": asdict(r.totals),
            "shown": len(r.rows),
        }
        return json_text(r.rows, meta) + "\n", None
    if not r.totals.rows:
        return f"{trace}: no {what} rows; was GPU activity traced (ProfilerActivity.CUDA, nsys -t cuda)?\n", None
    shown = named(r.rows)
    if r.by is None:
        relative, origin = from_first_start(shown)
        text = text_table(relative, PER_LAUNCH_COLS, width, name_width(width))
        if origin is not None:
            text += f"\nStart times in ms from {origin} ns."
    else:
        cols = [c for c in kernel_summary_cols(r.keys) if c.source != "no_launch" or r.totals.no_launch]
        if "sm_active_pct" in shown.columns:  # GPU metrics: the samples inside the name's executions
            cols.insert(len(cols) - len(r.keys), Col("SMs active (%)", "sm_active_pct", "pct", drop=1))
        if "engine" in shown.columns:  # the roofline: matrix kernels' engine, achieved TFLOP/s, % of the roof
            at = len(cols) - len(r.keys)
            cols[at:at] = [c for c in ROOF_COLS if shown[c.source].notna().any()]
        if "fuses" in shown.columns:  # Inductor's kernels: the operations their names say they fuse
            cols.append(Col("Fuses (Triton)", "fuses", shrink=True, null=""))  # always: what the names hide
        text = text_table(shown, cols, width, name_width(width))
    lines = [wrapped for line in footer(r).splitlines() for wrapped in textwrap.wrap(line, width)]
    return text + "\n" + "\n".join(lines) + "\n", None


def name_width(width: int) -> int:
    """The least a kernel's name is given before columns are left out: a third of the terminal,
    24 to 36 characters (enough for the part where two names differ)."""
    return max(24, min(36, width // 3))


def named(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows with kernel names shown as everywhere in a terminal (``names.kernel_label``)."""
    if "name" not in rows.columns:
        return rows
    labels = {n: kernel_label(str(n)) for n in pd.unique(rows["name"].dropna())}
    out: pd.DataFrame = rows.assign(name=rows["name"].map(labels))
    return out


def _have(n: int) -> str:
    return "has" if n == 1 else "have"


def footer(r: KernelReport) -> str:
    what, by, t = "/".join(r.kinds), r.by, r.totals
    unit = {None: f"{what} rows", "name": "names", "launch": "launch APIs", "op": "operators"}.get(by, "groups")
    total = t.rows if by is None else getattr(t, "groups", t.rows)
    head = f"{t.rows:,} {what} rows, {t.exec_total_ns / 1e6:,.3f} ms of execution"
    lines = [head if by is None else f"{head}, {total:,} {unit}"]
    shown = len(r.rows)
    if shown < total:
        order = "launch order" if by is None else "that order"
        lines.append(f"Showing the {shown:,} longest of {total:,} {unit}; --top 0 shows all in {order}.")
    if t.no_launch:
        n = t.no_launch
        lines.append(
            f"{n:,} {'row' if n == 1 else 'rows'} {_have(n)} no launching call in the trace: kept and "
            "counted in execution time, with empty API, queue and wall times."
        )
    if by is not None:
        lines.append("Min, and the spread of queue, API and wall times: --format csv or json.")
    return "\n".join(lines)
