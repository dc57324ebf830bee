"""Numbers as people read them: one set of formatters for finding messages, tables and reports.

Prose (:func:`ms`, :func:`us`, :func:`mb`, :func:`size`) carries its unit; table cells (:data:`CELLS`) do
not, their column header names it. Missing values are ``-``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

NULL = "-"


def ms(ns: float | None) -> str:
    """Nanoseconds as milliseconds with two decimals: ``12.35 ms``."""
    return NULL if ns is None else f"{ns / 1e6:,.2f} ms"


def us(ns: float | None) -> str:
    """Nanoseconds as microseconds with one decimal, or as milliseconds from 1 ms on."""
    return NULL if ns is None else f"{ns / 1e3:,.1f} µs" if ns < 1e6 else ms(ns)


def mb(n: float | None) -> str:
    """Bytes as megabytes (10^6) with one decimal."""
    return NULL if n is None else f"{n / 1e6:,.1f} MB"


def size(n: float | None) -> str:
    """Bytes in the decimal family of :func:`mb`: ``16 B``, ``32.3 kB``, ``1,498.2 MB``."""
    if n is None:
        return NULL
    if abs(n) < 1e3:
        return f"{n:,.0f} B"
    return f"{n / 1e3:,.1f} kB" if abs(n) < 1e6 else mb(n)


def count(n: float) -> str:
    """A count, or a count per step: whole numbers as such (``900``), else one decimal (``2.5``), or two
    significant digits below 0.05 (``0.012``)."""
    if float(n).is_integer():
        return f"{n:,.0f}"
    return f"{n:,.1f}" if abs(n) >= 0.05 else f"{n:.2g}"


def signed(text: str, value: float) -> str:
    """``text`` with a ``+`` in front when ``value`` is positive (a change)."""
    return ("+" if value > 0 else "") + text


# Table cells, by the name a column gives its format.
CELLS: dict[str, Callable[[Any], str]] = {
    "int": lambda v: f"{int(v):,}",
    "id": lambda v: str(int(v)),
    "us": lambda v: f"{v / 1e3:,.3f}",
    "ms": lambda v: f"{v / 1e6:,.3f}",
    "pct": lambda v: f"{v:.1f}",
    "text": str,
}
