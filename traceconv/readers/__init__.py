"""Readers: one module per input format, each producing tables in the unified schema.

The registry picks a reader by content (magic bytes), not by file name, and imports it
lazily so that a PyTorch conversion never pays for the Nsight Systems reader and back.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from traceconv.errors import InputError, UnsupportedFormatError
from traceconv.readers.base import GZIP_MAGIC, Progress, Reader, TraceInfo, trace_stem

SQLITE_MAGIC = b"SQLite format 3\x00"
REPORT_MAGIC = b"NVIDIA Tegra Profiler Report"  # .nsys-rep and .qdrep, whatever their name

# format name -> (module, class)
REGISTRY: dict[str, tuple[str, str]] = {
    "pytorch": ("traceconv.readers.pytorch", "PytorchReader"),
    "nsys": ("traceconv.readers.nsys", "NsysReader"),
    "nsys-report": ("traceconv.readers.nsys", "NsysReportReader"),
}


def sniff(path: Path) -> str:
    """The format of ``path`` by its first bytes (and, for reports, its extension)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(64)
    except IsADirectoryError:
        raise UnsupportedFormatError(path, "is a directory", "give the directory to `traceconv ingest`") from None
    except OSError as exc:
        raise InputError(path, f"cannot be read ({exc.strerror or exc})", "check the path and permissions") from exc
    if head.startswith(SQLITE_MAGIC):
        return "nsys"
    if head.startswith(GZIP_MAGIC) or head.lstrip()[:1] in (b"{", b"["):
        return "pytorch"
    if path.suffix in (".nsys-rep", ".qdrep") or head.startswith(REPORT_MAGIC):
        return "nsys-report"
    if not head:
        raise InputError(path, "is empty", "the profiler may not have finished writing it")
    raise UnsupportedFormatError(
        path,
        "is neither a PyTorch profiler trace (JSON) nor an Nsight Systems report or SQLite export",
        "give a .json/.json.gz trace, a .nsys-rep/.qdrep report or its .sqlite export",
    )


def open_reader(path: Path, fmt: str | None = None, progress: Progress | None = None, **options: Any) -> Reader:
    fmt = fmt or sniff(path)
    module_name, cls_name = REGISTRY[fmt]
    cls = getattr(importlib.import_module(module_name), cls_name)
    # Options are capabilities: a reader takes those it declares (salvage is meaningless for
    # SQLite); the others are recorded in ``info.ignored`` for the caller to tell the user,
    # rather than failing a batch that mixes formats.
    accepted: frozenset[str] = cls.OPTIONS
    reader: Reader = cls(path, progress=progress, **{k: v for k, v in options.items() if k in accepted})
    reader.info.ignored.extend(k for k in options if k not in accepted)
    return reader


__all__ = ["REGISTRY", "Progress", "Reader", "TraceInfo", "open_reader", "sniff", "trace_stem"]
