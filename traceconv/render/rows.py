"""Any query's result, a batch at a time: an aligned table of its first rows, CSV or JSON.

The three take an iterator of Arrow record batches and yield text as it comes, so a result
of millions of rows is written in bounded memory. CSV and JSON keep every value as the query
gave it (integers exact); the table shows the first ``limit`` rows and counts the rest.
"""

from __future__ import annotations

import decimal
import io
import json
import math
from collections.abc import Iterable, Iterator
from typing import Any

import orjson
import pyarrow as pa

from traceconv.render.columns import left_out
from traceconv.units import NULL


def table_text(batches: Iterable[pa.RecordBatch], limit: int, width: int) -> Iterator[str]:
    """The first ``limit`` rows (0: all) as an aligned table, then a line counting the rows."""
    names: list[str] | None = None
    kept: list[list[str]] = []
    numeric: list[bool] = []
    rows = 0
    for batch in batches:
        if names is None:
            names = batch.schema.names
            numeric = [_is_number(f.type) for f in batch.schema]
        room = batch.num_rows if not limit else max(0, min(batch.num_rows, limit - len(kept)))
        if room:
            columns = [[_cell(v) for v in col.to_pylist()] for col in batch.slice(0, room).columns]
            kept += [list(r) for r in zip(*columns, strict=True)] if columns else []
        rows += batch.num_rows
    if names is None:  # a statement with no result (SET ...)
        return
    widths = _fitted([max([len(n), *(len(r[i]) for r in kept)]) for i, n in enumerate(names)], numeric, width)
    cols = len(widths)  # the columns that fit, from the left
    yield _line(names[:cols], widths, numeric[:cols]) + "\n"
    yield _line(["-" * w for w in widths], widths, numeric[:cols]) + "\n"
    for r in kept:
        yield _line(r[:cols], widths, numeric[:cols]) + "\n"
    shown = f"{len(kept):,} shown; --limit 0 shows all, --format csv or json writes all" if len(kept) < rows else ""
    yield f"({rows:,} row{'s' if rows != 1 else ''}{'; ' + shown if shown else ''})\n"
    for line in left_out(names[cols:], width):
        yield line + "\n"


def csv_text(batches: Iterable[pa.RecordBatch]) -> Iterator[str]:
    """RFC 4180 CSV with a header; missing values empty."""
    header = True
    for batch in batches:
        if header:
            yield ",".join(_csv_field(n) for n in batch.schema.names) + "\n"
            header = False
        out = io.StringIO()
        for row in zip(*(col.to_pylist() for col in batch.columns), strict=True):
            out.write(",".join(_csv_field(v) for v in row) + "\n")
        yield out.getvalue()


def json_text(batches: Iterable[pa.RecordBatch]) -> Iterator[str]:
    """One JSON array of row objects (column name -> value), written as the rows come."""
    first = True
    yield "["
    for batch in batches:
        for row in batch.to_pylist():
            yield ("\n" if first else ",\n") + _json_dumps(row)
            first = False
    yield "\n]\n" if not first else "]\n"


def _is_number(typ: pa.DataType) -> bool:
    return bool(pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_decimal(typ))


def _cell(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return NULL
    if isinstance(v, float):
        return f"{v:.6g}" if abs(v) < 1e15 else f"{v:.6e}"
    if isinstance(v, (list, dict)):
        return _json_dumps(v)
    return str(v).replace("\n", " ")


def _fitted(widths: list[int], numeric: list[bool], width: int) -> list[int]:
    """The widths of the columns that fit ``width``: the widest text columns shortened first (none below
    12), then the columns on the right left out (the first is always shown)."""
    widths = list(widths)
    while sum(widths) + 2 * (len(widths) - 1) > width:
        text = [i for i, n in enumerate(numeric[: len(widths)]) if not n and widths[i] > 12]
        if not text:
            if len(widths) == 1:
                break
            widths.pop()
            continue
        widest = max(text, key=lambda i: widths[i])
        widths[widest] = max(12, widths[widest] - (sum(widths) + 2 * (len(widths) - 1) - width))
    return widths


def _line(values: list[str], widths: list[int], numeric: list[bool]) -> str:
    cells = []
    for v, w, n in zip(values, widths, numeric, strict=True):
        v = v if len(v) <= w else v[: w - 1] + "…"
        cells.append(v.rjust(w) if n else v.ljust(w))
    return "  ".join(cells).rstrip()


def _csv_field(v: Any) -> str:
    if v is None:
        return ""
    text = _json_dumps(v) if isinstance(v, (list, dict)) else str(v)
    if any(c in text for c in ',"\n\r'):
        return '"' + text.replace('"', '""') + '"'
    return text


def _json_dumps(v: Any) -> str:
    try:
        return orjson.dumps(v, default=_json_value).decode()
    except TypeError:  # an integer beyond 64 bits (a HUGEINT sum): the standard library writes those
        return json.dumps(v, default=_json_value, ensure_ascii=False, separators=(",", ":"))


def _json_value(v: Any) -> Any:
    """What orjson does not write itself: DuckDB's HUGEINT sums and DECIMALs, bytes, intervals."""
    if isinstance(v, decimal.Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return str(v)
