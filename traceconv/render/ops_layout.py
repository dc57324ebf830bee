"""The columns of ``traceconv ops``'s table: torch's layout, and the same table fitted to a terminal.

torch's ``key_averages().table()`` gives every column 12 characters and the names 55, 200 or more
in all; the command prints that layout as it is where its output is not a terminal (a file, a
pipe: the table torch prints). In a terminal, :func:`fitted` sizes each column to what it holds,
leaves out the columns of :data:`DROP` until the table fits, highest first, and gives the names
(and input shapes and source locations) what is left.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from traceconv.render.columns import Col, fit_columns

# What a terminal leaves out first, highest first (pairs together); Name, the CUDA times (the CPU
# times without GPU work) and # of Calls stay.
DROP = {
    **dict.fromkeys(("CUDA Mem", "Self CUDA Mem"), 9),
    **dict.fromkeys(("CPU Mem", "Self CPU Mem"), 8),
    **dict.fromkeys(("CPU time avg", "CUDA time avg"), 7),
    **dict.fromkeys(("Self CPU %", "CPU total %"), 6),
    "Self CUDA %": 5,
    "Total FLOPs": 4,
    "TFLOP/s": 4,
    "Self CPU": 3,
    "CPU total": 2,
}
SHRINK = ("Name", "Input Shapes", "Source Location")


@dataclasses.dataclass(frozen=True)
class Layout:
    headers: list[str]
    widths: list[int]
    left: list[bool]
    device: bool
    device_mem: bool
    shapes: bool
    source: bool
    src_width: int = 0
    flops: tuple[float, str] | None = None  # scale and header of the FLOPs column
    shown: tuple[int, ...] | None = None  # fitted to a terminal: the columns kept (None: torch's table)

    def _columns(self) -> Sequence[int]:
        return self.shown if self.shown is not None else range(len(self.widths))

    def line(self, values: Sequence[Any]) -> str:
        cells = [
            f"{values[i]!s:<{self.widths[i]}}" if self.left[i] else f"{values[i]!s:>{self.widths[i]}}"
            for i in self._columns()
        ]
        text = "".join(c + "  " for c in cells)
        return text if self.shown is None else text.rstrip()

    @property
    def rule(self) -> str:
        text = "".join("-" * self.widths[i] + "  " for i in self._columns())
        return text if self.shown is None else text.rstrip()

    def left_out(self) -> list[str]:
        return [h for i, h in enumerate(self.headers) if self.shown is not None and i not in self.shown]


def fitted(lay: Layout, cells: Sequence[Sequence[str]], width: int) -> Layout:
    """``lay`` for a terminal of ``width`` columns, its columns as wide as ``cells`` (every row's texts
    in the order of the headers, the source location's entries as rows of their own) need.

    torch writes the FLOPs after the input shapes and before the source location, under the
    headers it wrote in the other order: here the headers follow the values.
    """
    headers, left = list(lay.headers), list(lay.left)
    if lay.source and lay.flops:
        at = headers.index("Source Location")
        headers[at], headers[at + 1] = headers[at + 1], headers[at]
        left[at], left[at + 1] = left[at + 1], left[at]
    natural = [max([len(h), *(len(row[i]) for row in cells if i < len(row))]) for i, h in enumerate(headers)]
    cols = [
        Col(h, "", shrink=h in SHRINK, drop=DROP.get("Total FLOPs" if h.startswith("Total ") else h, 0))
        for h in headers
    ]
    shown, widths = fit_columns(cols, natural, width, max(24, min(40, width // 3)))
    src = widths[headers.index("Source Location")] if lay.source else 0
    return dataclasses.replace(lay, headers=headers, widths=widths, left=left, src_width=src, shown=tuple(shown))
