"""Progress on stderr, only when stderr is a terminal and the work is long."""

from __future__ import annotations

import sys
import time


class Bar:
    """Bytes read of one input (``unit="MiB"``, shown from 4 MiB on), or a count of traces done."""

    MIN_BYTES = 4 << 20

    def __init__(self, label: str, unit: str = "MiB") -> None:
        self.label = label
        self.unit = unit
        self.last = 0.0
        self.enabled = sys.stderr.isatty()

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or (self.unit == "MiB" and total < self.MIN_BYTES):
            return
        now = time.monotonic()
        if now - self.last < 0.1 and done < total:
            return
        self.last = now
        pct = min(100.0, 100.0 * done / max(total, 1))
        filled = int(pct / 100 * 30)
        if self.unit == "MiB":
            amount = f"{done / 2**20:,.0f}/{total / 2**20:,.0f} MiB"
        else:
            amount = f"{done}/{total} {self.unit}"
        sys.stderr.write(f"\r{self.label} [{'#' * filled}{'.' * (30 - filled)}] {pct:5.1f}% {amount}")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled and self.last:
            sys.stderr.write("\r" + " " * 100 + "\r")
            sys.stderr.flush()
