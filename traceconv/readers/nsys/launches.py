"""The launching CUDA API calls, kept on disk, for GPU rows to find theirs by correlation id.

GPU work is linked to its call by correlation id *within the process* (``nsys stats``'
key); exports before globalPid was written on GPU rows link by correlation id alone. The calls
arrive a batch at a time, in event order; each batch becomes a *run*: its calls sorted by key
(process code << 40 | correlation id), written to a temporary file per process (a *segment*)
one field after another, with what a GPU row takes from its call; each field of a segment as its
difference from the field's smallest value there, in the fewest bytes that hold them (keys,
times, thread and name codes of one batch span little: about 3x fewer bytes than int64). Memory
holds, per segment, only the first and last key and every :data:`SAMPLE`-th key, so that a lookup
reads only the records around its keys.

A lookup finds the first call in event order with the key (as a search of all calls would):
runs are searched in order, and within a run the sort is stable. CUPTI numbers calls in the
order they start, so a batch of GPU rows finds its calls in one or two runs.
"""

from __future__ import annotations

import itertools
import os
import tempfile
from dataclasses import dataclass
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traceconv.readers.arrow_util import I64

CORR_BITS = 40  # a key is (process code << 40) | correlation id
SAMPLE = 512  # every SAMPLE-th key of a run is kept in memory
# What a GPU row takes from its call: its row among the calls (its event id less the table's
# first), times, thread, name code, and its NVTX range (event id and name code, -1: none).
FIELDS = ("key", "pos", "start", "end", "gtid", "name", "op_eid", "op_name")
Calls = dict[str, I64]


@dataclass(frozen=True)
class _Field:
    """One field of a segment in the file: where, in which type, and the value its zero stands for."""

    offset: int
    dtype: np.dtype[Any]
    base: int


@dataclass(frozen=True)
class _Segment:
    """The calls of one process in one run: key range, where its fields are, sampled keys."""

    lo: int
    hi: int
    count: int
    fields: tuple[_Field, ...]  # in the order of FIELDS
    samples: I64


def _narrow(values: I64) -> tuple[np.dtype[Any], int]:
    """The smallest unsigned type that holds ``values`` less their minimum, and that minimum."""
    lo, hi = int(values.min()), int(values.max())
    for dtype in (np.uint8, np.uint16, np.uint32):
        if hi - lo <= np.iinfo(dtype).max:
            return np.dtype(dtype), lo
    return np.dtype(np.int64), 0


def nothing(n: int) -> Calls:
    """``n`` answers of no call (every field -1)."""
    return {f: np.full(n, -1, dtype=np.int64) for f in FIELDS}


class LaunchIndex:
    """Calls by key; ``by_process``: keys include the process (else the correlation id alone)."""

    def __init__(self, by_process: bool) -> None:
        self.by_process = by_process
        self._procs: dict[int, int] = {}
        # Unnamed (removed at once): nothing is left behind, whatever stops the conversion.
        self._file: IO[bytes] = tempfile.TemporaryFile(prefix="traceconv-calls-", buffering=0)  # noqa: SIM115
        self._size = 0
        self._segments: list[_Segment] = []
        self._lo = np.empty(0, np.int64)
        self._hi = np.empty(0, np.int64)
        self.duplicates = 0  # calls that repeat the key of an earlier call

    def close(self) -> None:
        self._file.close()

    def keys(self, corr: I64, gpid: I64, add: bool = False) -> I64:
        """Each row's key, -1 where it has none (no correlation id, one past 40 bits, or a process
        no call has); ``add``: processes not seen yet get codes (calls, not GPU rows)."""
        ok = (corr > 0) & (corr < (1 << CORR_BITS))
        if not self.by_process:
            return np.where(ok, corr, -1)
        enc = pc.dictionary_encode(pa.array(gpid))
        distinct = enc.dictionary.to_pylist()
        if add:
            for g in distinct:
                self._procs.setdefault(g, len(self._procs))
        lut = np.array([self._procs.get(g, -1) for g in distinct] + [-1], dtype=np.int64)
        code = lut[np.asarray(enc.indices, dtype=np.int64)] if len(gpid) else np.empty(0, np.int64)
        return np.where(ok & (code >= 0), (code << CORR_BITS) | np.maximum(corr, 0), -1)

    def add(self, calls: Calls) -> None:
        """One batch of calls (``key`` -1: none), in event order."""
        keep = np.flatnonzero(calls["key"] >= 0)
        keep = keep[np.argsort(calls["key"][keep], kind="stable")]
        if not len(keep):
            return
        run = {f: calls[f][keep] for f in FIELDS}
        keys = run["key"]
        first = np.concatenate(([True], keys[1:] != keys[:-1]))
        self.duplicates += int((~first).sum()) + self._seen(keys[first])
        procs = keys >> CORR_BITS
        cuts = [0, *(np.flatnonzero(procs[1:] != procs[:-1]) + 1).tolist(), len(keys)]
        for a, b in itertools.pairwise(cuts):
            fields = []
            for f in FIELDS:  # each field narrowed and written straight from its buffer
                dtype, base = _narrow(run[f][a:b])
                fields.append(_Field(self._size, dtype, base))
                self._write((run[f][a:b] - base).astype(dtype).data.cast("B"))
            samples = keys[a:b:SAMPLE].copy()
            self._segments.append(_Segment(int(keys[a]), int(keys[b - 1]), b - a, tuple(fields), samples))
        self._lo = np.array([s.lo for s in self._segments], np.int64)
        self._hi = np.array([s.hi for s in self._segments], np.int64)

    def _seen(self, distinct: I64) -> int:
        """How many of these (sorted, distinct) keys earlier calls have: only the keys inside an
        earlier segment's range are searched (correlation ids grow with time: few or none)."""
        a, b = np.searchsorted(distinct, self._lo, "left"), np.searchsorted(distinct, self._hi, "right")
        inside = np.zeros(len(distinct) + 1, dtype=np.int64)
        np.add.at(inside, a[b > a], 1)
        np.add.at(inside, b[b > a], -1)
        probe = distinct[np.cumsum(inside[:-1]) > 0]
        return int((self.find(probe)["pos"] >= 0).sum()) if len(probe) else 0

    def find(self, keys: I64) -> Calls:
        """For each key, the fields of the first call with it (every field -1: none)."""
        out = nothing(len(keys))
        if not len(keys) or not len(self._lo):
            return out
        order = np.argsort(keys, kind="stable")
        sk = keys[order]
        a, b = np.searchsorted(sk, self._lo, "left"), np.searchsorted(sk, self._hi, "right")
        for s in np.flatnonzero(b > a).tolist():
            probe = order[a[s] : b[s]]
            probe = probe[out["pos"][probe] < 0]  # an earlier run found it first
            if len(probe):
                at, got = self._search(self._segments[s], keys[probe])
                for f in FIELDS:
                    out[f][probe[at]] = got[f]
        return out

    def _search(self, seg: _Segment, keys: I64) -> tuple[I64, Calls]:
        """(which of ``keys`` the segment has, the fields of the first call with each of those)."""
        lo = max(int(np.searchsorted(seg.samples, keys.min(), "left")) - 1, 0) * SAMPLE
        hi = min((int(np.searchsorted(seg.samples, keys.max(), "right")) + 1) * SAMPLE, seg.count)
        chunk = {f: self._read(seg, i, lo, hi) for i, f in enumerate(FIELDS)}
        at = np.minimum(np.searchsorted(chunk["key"], keys, "left"), hi - lo - 1)
        hit = np.flatnonzero(chunk["key"][at] == keys)
        return hit, {f: chunk[f][at[hit]] for f in FIELDS}

    def _read(self, seg: _Segment, field: int, lo: int, hi: int) -> I64:
        """Calls ``[lo, hi)`` of the segment, one field."""
        f = seg.fields[field]
        size = f.dtype.itemsize
        data = os.pread(self._file.fileno(), size * (hi - lo), f.offset + size * lo)
        return np.frombuffer(data, f.dtype).astype(np.int64) + f.base

    def _write(self, data: memoryview) -> None:
        view, at = data, self._size
        while view:
            done = os.pwrite(self._file.fileno(), view, at)
            view, at = view[done:], at + done
        self._size = at
