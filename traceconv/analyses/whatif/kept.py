"""The spans a replay's critical path reads (:mod:`.path`), kept on disk a window of calls at a
time (:class:`Kept`) and read back a window of time at a time: the replay of a large trace does not
hold them all.
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from traceconv.analyses import intervals as I
from traceconv.analyses.source import Source
from traceconv.analyses.whatif import path as P

_NONE = np.iinfo(np.int64).min


@dataclass(frozen=True)
class _Chunk:
    """One window's spans on disk, and the times they reach (to read only the chunks a window of time needs)."""

    path: Path
    gpu: tuple[int, int]  # the GPU rows' first start and last end (or start)
    starts: tuple[int, int]  # their first and last start
    queued: tuple[int, int]
    waits: tuple[int, int]
    rows: int


class Kept:
    """A replay's spans: the GPU rows (start, end, class, name), their queued spans and the host's
    waits, in a folder removed with the Source."""

    def __init__(self, source: Source) -> None:
        folder = tempfile.mkdtemp(prefix="traceconv-whatif-")
        source.on_close(weakref.finalize(self, shutil.rmtree, folder, True))
        self.folder = Path(folder)
        self.chunks: list[_Chunk] = []

    @property
    def rows(self) -> int:
        return sum(c.rows for c in self.chunks)

    def add(
        self, gpu: tuple[I.I64, I.I64, I.I64, np.ndarray], queued: tuple[I.I64, I.I64], waits: tuple[I.I64, I.I64]
    ) -> None:
        s, e, klass, name = gpu
        path = self.folder / f"{len(self.chunks)}.npz"
        np.savez(path, s=s, e=e, klass=klass, name=name, qs=queued[0], qe=queued[1], ws=waits[0], we=waits[1])
        self.chunks.append(
            _Chunk(path, _reach(s, np.maximum(e, s)), _reach(s, s), _reach(*queued), _reach(*waits), len(s))
        )

    def spans(self, t0: int, t1: int, ops: tuple[I.I64, I.I64]) -> P.Spans:
        """The spans that reach into ``[t0, t1)`` (the GPU rows: those that end at ``t0`` too)."""
        gpu: list[tuple[I.I64, ...]] = []
        queued: list[tuple[I.I64, I.I64]] = []
        waits: list[tuple[I.I64, I.I64]] = []
        after: int | None = None
        for c in self.chunks:
            wanted = (_meets(c.gpu, t0, t1, True), _meets(c.queued, t0, t1), _meets(c.waits, t0, t1))
            later = c.starts[1] >= t1  # some GPU row starts at or after t1
            if c.starts[0] >= t1 and (after is None or c.starts[0] < after):
                after = c.starts[0]
            if not (any(wanted) or (later and c.starts[0] < t1)):
                continue
            with np.load(c.path) as f:
                s, e = f["s"], f["e"]
                if wanted[0]:
                    keep = (s < t1) & (np.maximum(e, s) >= t0)
                    gpu.append((s[keep], e[keep], f["klass"][keep]))
                if later and c.starts[0] < t1:
                    first = int(s[s >= t1].min())
                    after = first if after is None else min(after, first)
                for on, parts, (a, b) in ((wanted[1], queued, ("qs", "qe")), (wanted[2], waits, ("ws", "we"))):
                    if on:
                        qs, qe = f[a], f[b]
                        keep = (qs < t1) & (qe > t0)
                        parts.append((qs[keep], qe[keep]))
        return P.Spans(
            gpu=(_cat(gpu, 0), _cat(gpu, 1), _cat(gpu, 2)),
            queued=I.union(_cat(queued, 0), _cat(queued, 1)),
            waits=I.union(_cat(waits, 0), _cat(waits, 1)),
            ops=ops,
            after=after,
        )

    def totals(self, lo: int, hi: int, names: int) -> np.ndarray:
        """Per name (its code + 1: -1 is null), the time of the GPU rows within ``[lo, hi]``."""
        out = np.zeros(names + 1, np.float64)
        for c in self.chunks:
            with np.load(c.path) as f:
                s, e = f["s"], f["e"]
                inside = (s >= lo) & (e <= hi)
                out += np.bincount(f["name"][inside] + 1, weights=(e - s)[inside], minlength=names + 1)
        return out


def _reach(s: I.I64, e: I.I64) -> tuple[int, int]:
    """The first start and the last end (none: an empty span that meets nothing)."""
    return (int(s.min()), int(e.max())) if len(s) else (0, _NONE)


def _meets(reach: tuple[int, int], t0: int, t1: int, closed: bool = False) -> bool:
    """Whether spans that reach ``reach`` may meet ``[t0, t1)`` (``closed``: one that ends at t0 does)."""
    return reach[0] < t1 and (reach[1] >= t0 if closed else reach[1] > t0)


def _cat(parts: Sequence[tuple[I.I64, ...]], k: int) -> I.I64:
    return np.concatenate([p[k] for p in parts]).astype(np.int64) if parts else np.zeros(0, np.int64)
