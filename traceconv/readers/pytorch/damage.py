"""What goes wrong in a chunk of events: decode errors, bad cuts, and what salvaging skipped or repaired."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


class ChunkDecodeError(Exception):
    """Raised by a chunk decoder; ``pos`` is the error's offset in ``b"[" + chunk + b"]"``."""

    def __init__(self, pos: int | None, message: str) -> None:
        self.pos = pos
        super().__init__(message)


def bad_cut(exc: ChunkDecodeError, chunk_len: int) -> bool:
    """A cut inside a nested value or string fails at the very end of the wrapped chunk."""
    return exc.pos is None or exc.pos >= chunk_len + 1


@dataclass
class Damage:
    """What salvaging skipped, and where the first damage was."""

    events_skipped: int = 0
    bytes_skipped: int = 0
    first_offset: int | None = None
    truncated: bool = False  # the document ended early, even if on an event boundary
    notes: list[str] = field(default_factory=list)
    repairs: Counter[str] = field(default_factory=Counter)

    def skip(self, offset: int, nbytes: int, events: int = 1) -> None:
        self.events_skipped += events
        self.bytes_skipped += nbytes
        if self.first_offset is None or offset < self.first_offset:
            self.first_offset = offset


@dataclass
class Document:
    """What surrounds the events: top-level keys before and after ``traceEvents``."""

    top: dict[str, Any] = field(default_factory=dict)
