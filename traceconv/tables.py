"""Analysis results as text: aligned terminal tables, CSV and JSON. Returns strings; the CLI prints.

Terminal tables show times in a readable unit named in the header and shorten long text
with an ellipsis; CSV and JSON keep every column, integers exact, in nanoseconds.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

NULL = "-"


def _int(v: Any) -> str:
    return f"{int(v):,}"


def _us(v: Any) -> str:
    return f"{v / 1e3:,.3f}"


def _ms(v: Any) -> str:
    return f"{v / 1e6:,.3f}"


def _pct(v: Any) -> str:
    return f"{v:.1f}"


def _id(v: Any) -> str:
    return str(int(v))


FORMATS: dict[str, Callable[[Any], str]] = {"int": _int, "id": _id, "us": _us, "ms": _ms, "pct": _pct, "text": str}


@dataclass(frozen=True)
class Col:
    """One column of a terminal table: its header, the DataFrame column and how to show it."""

    header: str
    source: str
    fmt: str = "text"  # a key of FORMATS
    shrink: bool = False  # the one column that gives way (with "…") when the table is too wide
    null: str = NULL


def text_table(df: pd.DataFrame, cols: Sequence[Col], width: int = 160, min_shrink: int = 24) -> str:
    """``df`` as an aligned table no wider than ``width`` (the ``shrink`` column is shortened)."""
    cells = [[_cell(v, c) for v in df[c.source].tolist()] for c in cols]
    widths = [max([len(c.header), *map(len, col)]) for c, col in zip(cols, cells, strict=True)]
    fixed = sum(w for w, c in zip(widths, cols, strict=True) if not c.shrink) + 2 * (len(cols) - 1)
    for i, c in enumerate(cols):
        if c.shrink:
            widths[i] = min(widths[i], max(min_shrink, len(c.header), width - fixed))
            cells[i] = [_shorten(v, widths[i]) for v in cells[i]]
    lines = [_line([c.header for c in cols], cols, widths), _line(["-" * w for w in widths], cols, widths)]
    lines += [_line([col[r] for col in cells], cols, widths) for r in range(len(df))]
    return "\n".join(lines)


def _cell(v: Any, col: Col) -> str:
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return col.null
    return FORMATS[col.fmt](v)


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _line(values: Sequence[str], cols: Sequence[Col], widths: Sequence[int]) -> str:
    parts = [v.ljust(w) if c.fmt == "text" else v.rjust(w) for v, c, w in zip(values, cols, widths, strict=True)]
    return "  ".join(parts).rstrip()


def records(df: pd.DataFrame, decimals: int = 1) -> list[dict[str, Any]]:
    """Rows as plain Python values: integers exact, floats rounded to ``decimals``, missing as None."""
    columns: dict[str, list[Any]] = {}
    for name in df.columns:
        s = df[name]
        if isinstance(s.dtype, pd.CategoricalDtype) or s.dtype == object or pd.api.types.is_string_dtype(s.dtype):
            columns[name] = [None if pd.isna(v) else str(v) for v in s.tolist()]
        elif pd.api.types.is_integer_dtype(s.dtype):
            columns[name] = [None if pd.isna(v) else int(v) for v in s.astype("Int64").tolist()]
        else:
            columns[name] = [None if pd.isna(v) else round(float(v), decimals) for v in s.tolist()]
    return [dict(zip(columns, row, strict=True)) for row in zip(*columns.values(), strict=True)] if columns else []


def csv_text(df: pd.DataFrame, decimals: int = 1) -> str:
    """``df`` as CSV: integers exact, floats rounded to ``decimals``, missing values empty."""
    floats = [c for c in df.columns if pd.api.types.is_float_dtype(df[c].dtype)]
    out = df.assign(**{c: df[c].round(decimals) for c in floats}) if floats else df
    text: str = out.to_csv(index=False, lineterminator="\n")
    return text


def json_text(df: pd.DataFrame, extra: dict[str, Any], decimals: int = 1) -> str:
    return json.dumps({**extra, "rows": records(df, decimals)}, ensure_ascii=False, indent=1)


# -- views of the kernels analysis ------------------------------------------------------------
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
        Col("Med (µs)", "exec_med_ns", "us"),
        Col("Max (µs)", "exec_max_ns", "us"),
        Col("StdDev (µs)", "exec_std_ns", "us"),
        Col("Avg queue (µs)", "queue_avg_ns", "us"),
        Col("Avg API (µs)", "api_avg_ns", "us"),
        Col("Avg wall (µs)", "wall_avg_ns", "us"),
        Col("No launch", "no_launch", "int"),
    ]
    for key in keys:
        cols.append(_KEY_COLS[key])
    return cols


_KEY_COLS = {
    "name": Col("Name", "name", shrink=True),
    "launch_name": Col("Launch API", "launch_name", null="(no launching call)"),
    "pid": Col("PID", "pid", "id"),
    "tid": Col("TID", "tid", "id"),
    "device": Col("Dev", "device", "id"),
}

PER_LAUNCH_COLS = [
    Col("API Start (ms)", "api_start_ns", "ms"),
    Col("API (µs)", "api_dur_ns", "us"),
    Col("Queue (µs)", "queue_dur_ns", "us"),
    Col("Kernel Start (ms)", "kernel_start_ns", "ms"),
    Col("Kernel (µs)", "kernel_dur_ns", "us"),
    Col("Total (µs)", "total_dur_ns", "us"),
    Col("PID", "pid", "id"),
    Col("TID", "tid", "id"),
    Col("Dev", "device", "id"),
    Col("Stream", "stream", "id"),
    Col("API Function", "launch_name", null="(none in trace)"),
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
