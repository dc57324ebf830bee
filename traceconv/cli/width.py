"""How wide the terminal tables are: the terminal's width, or a default where the output is not one."""

from __future__ import annotations

import shutil
from typing import overload


@overload
def terminal_width(default: int) -> int: ...


@overload
def terminal_width(default: None) -> int | None: ...


def terminal_width(default: int | None) -> int | None:
    """``$COLUMNS``, else the width of the terminal that standard output is, else ``default`` (output
    to a file or a pipe)."""
    columns = shutil.get_terminal_size((0, 0)).columns
    return columns if columns > 0 else default


def prose_width() -> int:
    """summary, diff and ranks: tables among paragraphs, 160 columns at most (longer lines are hard
    to read); 100 where the output is not a terminal."""
    return min(terminal_width(100), 160)
