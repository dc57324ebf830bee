"""Which columns a terminal table shows, and how wide: shared by every table of the command line
(light: ``sql`` imports it without pandas)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

from traceconv.units import NULL


@dataclass(frozen=True)
class Col:
    """One column of a terminal table: its header, the DataFrame column and how to show it."""

    header: str
    source: str
    fmt: str = "text"  # a key of units.CELLS
    shrink: bool = False  # a column that gives way (names cut where they differ) when the table is too wide
    null: str = NULL
    drop: int = 0  # 0: always shown; else left out when the table does not fit, highest first (equal ones together)


def fit_columns(cols: Sequence[Col], natural: Sequence[int], width: int, floor: int) -> tuple[list[int], list[int]]:
    """The columns shown (their indices) and each column's width, for a table of at most ``width``."""
    shown = list(range(len(cols)))
    ranks = sorted({c.drop for c in cols if c.drop}, reverse=True)
    while True:
        widths = _shrunk(cols, natural, shown, width, floor)
        if _total(widths, shown) <= width:
            return shown, widths
        if not ranks:  # every optional column gone: the names give way further, to a few characters each
            return shown, _shrunk(cols, natural, shown, width, min(floor, 8))
        rank = ranks.pop(0)
        shown = [i for i in shown if cols[i].drop != rank]


def _shrunk(cols: Sequence[Col], natural: Sequence[int], shown: Sequence[int], width: int, floor: int) -> list[int]:
    """Natural widths, the ``shrink`` columns among ``shown`` sharing what the others leave of ``width``."""
    widths = list(natural)
    give = sorted((i for i in shown if cols[i].shrink), key=lambda i: natural[i])
    room = width - sum(natural[i] for i in shown if not cols[i].shrink) - 2 * (len(shown) - 1)
    for n, i in enumerate(give):  # the narrowest first: what one does not need goes to the next
        least = min(natural[i], max(floor, len(cols[i].header)))
        widths[i] = max(least, min(natural[i], room // (len(give) - n)))
        room -= widths[i]
    return widths


def _total(widths: Sequence[int], shown: Sequence[int]) -> int:
    return sum(widths[i] for i in shown) + 2 * (len(shown) - 1)


def left_out(headers: Sequence[str], width: int) -> list[str]:
    """The line (wrapped to ``width``) that names the columns a table left out to fit ``width``."""
    if not headers:
        return []
    named = ", ".join(headers) if len(headers) <= 12 else f"{len(headers)} columns, {headers[0]} to {headers[-1]}"
    return textwrap.wrap(f"Not shown at {width} columns: {named} (--format json has them).", width)
