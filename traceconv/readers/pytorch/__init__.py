"""PyTorch profiler traces (Kineto Chrome trace JSON, plain or gzip): :class:`PytorchReader`.

``reader`` runs the two passes; ``gunzip``, ``prefetch`` and ``chunker`` read the document
and cut it into chunks of whole events; ``decode``, ``repair`` and ``times`` decode a chunk;
``columns`` builds its unified columns; ``workers`` does that in forked processes; ``spill``
keeps the chunk tables between the passes; ``links`` and ``operators`` link GPU work to the
API calls that launched it and those to their CPU operators.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from traceconv.readers.pytorch.reader import PytorchReader

__all__ = ["PytorchReader"]


def __getattr__(name: str) -> Any:
    if name == "PytorchReader":  # imported on first use: the package's modules import each other
        from traceconv.readers.pytorch.reader import PytorchReader

        return PytorchReader
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
