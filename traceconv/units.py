"""Numbers as people read them: one set of formatters for finding messages, tables and reports.

Prose (:func:`ms`, :func:`us`, :func:`mb`) carries its unit; table cells (:data:`CELLS`) do
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
