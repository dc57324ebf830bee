"""traceconv: PyTorch profiler traces and Nsight Systems reports -> one unified Parquet schema.

The API is imported on first use: the command line sets up the process (its memory
allocator) before pyarrow is loaded.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from traceconv.errors import TraceconvError

if TYPE_CHECKING:
    from traceconv.io import read_table, read_unified, trace_metadata
    from traceconv.schema import SCHEMA, SCHEMA_VERSION
    from traceconv.writing import convert, read

__version__ = "0.1.0"
__all__ = [
    "SCHEMA",
    "SCHEMA_VERSION",
    "TraceconvError",
    "convert",
    "read",
    "read_table",
    "read_unified",
    "trace_metadata",
]
_LAZY = {
    "SCHEMA": "traceconv.schema",
    "SCHEMA_VERSION": "traceconv.schema",
    "convert": "traceconv.writing",
    "read": "traceconv.writing",
    "read_table": "traceconv.io",
    "read_unified": "traceconv.io",
    "trace_metadata": "traceconv.io",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'traceconv' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
