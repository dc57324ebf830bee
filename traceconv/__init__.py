"""traceconv: PyTorch profiler traces and Nsight Systems reports -> one unified Parquet schema."""

from traceconv.errors import TraceconvError
from traceconv.io import convert, read, read_table, read_unified, trace_metadata
from traceconv.schema import SCHEMA, SCHEMA_VERSION

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
