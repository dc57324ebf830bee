"""The building blocks of every text output: aligned terminal tables, Markdown, CSV and JSON.

Terminal tables show times in a readable unit named in the header and shorten long text
with an ellipsis; CSV and JSON keep every column, integers exact, in nanoseconds. Returns
strings; the CLI prints.
"""

from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Sequence
from typing import Any

import pandas as pd

from traceconv.analyses.finding import Finding
from traceconv.names import fit
from traceconv.render.columns import Col, fit_columns, left_out
from traceconv.units import CELLS


def text_table(df: pd.DataFrame, cols: Sequence[Col], width: int = 160, min_shrink: int = 24) -> str:
    """``df`` as an aligned table no wider than ``width``: the ``shrink`` columns give way first, down to
    ``min_shrink`` characters (names cut where they differ: :func:`names.fit`), then the columns with a
    ``drop`` rank are left out, highest first, and a last line names them."""
    cells = [[_cell(v, c) for v in df[c.source].tolist()] for c in cols]
    natural = [max([len(c.header), *map(len, col)]) for c, col in zip(cols, cells, strict=True)]
    shown, widths = fit_columns(cols, natural, width, min_shrink)
    for i in shown:
        if cols[i].shrink:
            cells[i] = fit(cells[i], widths[i])
    kept = [cols[i] for i in shown]
    sizes = [widths[i] for i in shown]
    lines = [_line([c.header for c in kept], kept, sizes), _line(["-" * w for w in sizes], kept, sizes)]
    lines += [_line([cells[i][r] for i in shown], kept, sizes) for r in range(len(df))]
    lines += left_out([c.header for i, c in enumerate(cols) if i not in shown], width)
    return "\n".join(lines)


def _cell(v: Any, col: Col) -> str:
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return col.null
    return CELLS[col.fmt](v)


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
    """``df``'s rows under ``rows``, after the keys of ``extra``."""
    return json_document({**extra, "rows": records(df, decimals)})


def json_document(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, indent=1)


class Doc:
    """Lines of a terminal table or Markdown document, built section by section."""

    def __init__(self, markdown: bool, width: int) -> None:
        self.markdown, self.width = markdown, width
        self.lines: list[str] = []

    def title(self, text: str) -> None:
        self.lines += [f"# {text}", ""] if self.markdown else [_fit(text, self.width)]

    def heading(self, text: str) -> None:
        if self.markdown:
            self.lines += ["", f"## {text}", ""]
        else:
            self.lines += ["", *textwrap.wrap(f"{text}:", self.width, subsequent_indent="  ")]

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
            self.lines += text_table(df, cols, self.width, min_shrink=max(12, min(30, self.width // 4))).splitlines()

    def findings(self, findings: Sequence[Finding]) -> None:
        if not findings:
            self.line("none above the thresholds")
            return
        for f in findings:
            head = f"{f.severity.upper()} {f.code}"
            if self.markdown:
                self.lines.append(f"- **{head}**: {f.message}")
            else:
                self.lines += textwrap.wrap(f"{head}: {f.message}", self.width, subsequent_indent="    ")

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
