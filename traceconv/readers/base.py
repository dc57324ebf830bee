"""What every reader shares: the description of a trace and the reader protocol."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import pyarrow as pa

Progress = Callable[[int, int], None]  # (bytes done, bytes total)

_TRACE_SUFFIXES = re.compile(r"(\.pt)?\.trace(\.json)?(\.gz)?$|\.json(\.gz)?$|\.(sqlite|nsys-rep|qdrep|tmp)$")


def trace_stem(path: Path) -> str:
    """``rank0.pt.trace.json.gz`` -> ``rank0``; the default output name and ``trace_id``."""
    name = path.name
    stem = _TRACE_SUFFIXES.sub("", name)
    return stem or name


@dataclass
class TraceInfo:
    """Trace-level facts a reader learns while reading; complete once its tables are consumed."""

    path: Path
    source: str
    trace_id: str
    rank: int | None = None
    time_base: str = "relative"  # "unix_epoch" when start_ns is nanoseconds since 1970
    metadata: dict[str, Any] = field(default_factory=dict)  # trace-level metadata, JSON-able
    notes: list[str] = field(default_factory=list)  # what a user should know (repairs, gaps)
    counters: dict[str, int] = field(default_factory=dict)  # e.g. events read, unlinked GPU rows
    partial: bool = False  # True when --salvage skipped damaged or incomplete input


class Reader(Protocol):
    """One input file -> tables in the unified schema, in bounded batches."""

    info: TraceInfo

    def tables(self) -> Iterator[pa.Table]: ...


ReaderFactory = Callable[..., Reader]
