"""What every reader shares: the description of a trace and the reader protocol."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    import pyarrow as pa

Progress = Callable[[int, int], None]  # (bytes done, bytes total)
GZIP_MAGIC = b"\x1f\x8b"

_TRACE_SUFFIXES = re.compile(r"(\.pt)?\.trace(\.json)?(\.gz)?$|\.json(\.gz)?$|\.(sqlite|nsys-rep|qdrep|tmp)$")


def trace_stem(path: Path) -> str:
    """``rank0.pt.trace.json.gz`` -> ``rank0``; the default output name and ``trace_id``."""
    name = path.name
    stem = _TRACE_SUFFIXES.sub("", name)
    return stem or name


class Rewind(Exception):
    """Raised by a reader's ``tables()`` that must be read again from the start (it found its input
    stored otherwise than it assumed, and now knows how to read it): what it yielded does not stand."""


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
    ignored: list[str] = field(default_factory=list)  # options given that this input's reader cannot use


# What the command line calls each reader option, and why a reader may not take it.
OPTION_FLAGS = {
    "salvage": "--salvage",
    "workers": "--workers",
    "include_environment": "--include-environment",
    "nsys": "--nsys",
}
_NOT_FOR = {
    ("salvage", "nsys"): "a damaged SQLite export is refused whole, with the reason",
    ("workers", "nsys"): "an export's tables are read by threads of this process",
}
_SOURCES = {"pytorch": "PyTorch traces", "nsys": "Nsight Systems exports and reports"}


def unlaunched_note(rows: int, what: str) -> str:
    """The note both readers write when GPU rows have no launching call in the input."""
    return (
        f"{rows:,} kernel/memcpy/memset rows have no launching CUDA API call in the {what} (UVM migrations, "
        "or calls outside the capture): their launch_* are null"
    )


def ignored_option(name: str, source: str) -> str:
    """What a user is told about an option that the reader of ``source`` cannot use."""
    why = _NOT_FOR.get((name, source))
    return (
        f"{OPTION_FLAGS.get(name, name)} does not apply to {_SOURCES.get(source, source)}"
        + (f" ({why})" if why else "")
        + "; ignored"
    )


class Reader(Protocol):
    """One input file -> tables in the unified schema, in bounded batches.

    ``OPTIONS``: the keyword options its constructor takes besides ``progress`` (its
    capabilities); :func:`traceconv.readers.open_reader` says which given ones it ignores.
    """

    OPTIONS: ClassVar[frozenset[str]]
    info: TraceInfo

    def tables(self) -> Iterator[pa.Table]: ...


ReaderFactory = Callable[..., Reader]
