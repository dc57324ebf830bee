"""The launching CUDA API calls, kept on disk, for GPU rows to find theirs by correlation id.

GPU work is linked to its call by correlation id *within the process* (``nsys stats``'
key); exports before globalPid was written on GPU rows link by correlation id alone. The calls
arrive a batch at a time, in event order; each batch becomes a *run*: its calls sorted by key
(process code << 40 | correlation id), written to a temporary file as fixed-size records with
what a GPU row takes from its call. Memory holds, per run and process, only the first and last
key and every :data:`SAMPLE`-th key, so that a lookup reads only the records around its keys.

A lookup finds the first call in event order with the key (as a search of all calls would):
runs are searched in order, and within a run the sort is stable. CUPTI numbers calls in the
order they start, so a batch of GPU rows finds its calls in one or two runs.
"""

from __future__ import annotations

import itertools
import os
import tempfile
from dataclasses import dataclass, field
from typing import IO

import numpy as np
import numpy.typing as npt

from traceconv.readers.arrow_util import I64

CORR_BITS = 40  # a key is (process code << 40) | correlation id
SAMPLE = 512  # every SAMPLE-th key of a run is kept in memory
RECORD = np.dtype(
    [
        ("key", "<i8"),
        ("pos", "<i8"),  # the call's row among the calls (its event id less the table's first)
        ("start", "<i8"),
        ("end", "<i8"),
        ("gtid", "<i8"),
        ("op_eid", "<i8"),  # its NVTX range's event id, -1: none
        ("name", "<i4"),  # code of its name
        ("op_name", "<i4"),  # code of its range's name, -1: none
    ]
)
Records = npt.NDArray[np.void]


@dataclass
class _Segments:
    """Per run and process: the key range and where its records are (in records, not bytes)."""

    lo: list[int] = field(default_factory=list)
    hi: list[int] = field(default_factory=list)
    offset: list[int] = field(default_factory=list)
    count: list[int] = field(default_factory=list)
    samples: list[I64] = field(default_factory=list)


class LaunchIndex:
    """Calls by key; ``by_process``: keys include the process (else the correlation id alone)."""

    def __init__(self, by_process: bool) -> None:
        self.by_process = by_process
        self._procs: dict[int, int] = {}
        # Unnamed (removed at once): nothing is left behind, whatever stops the conversion.
        self._file: IO[bytes] = tempfile.TemporaryFile(prefix="traceconv-calls-", buffering=0)  # noqa: SIM115
        self._records = 0
        self._seg = _Segments()
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
        distinct = np.unique(gpid)
        if add:
            for g in distinct.tolist():
                self._procs.setdefault(g, len(self._procs))
        codes = np.array([self._procs.get(g, -1) for g in distinct.tolist()], dtype=np.int64)
        code = codes[np.searchsorted(distinct, gpid)] if len(gpid) else np.empty(0, np.int64)
        return np.where(ok & (code >= 0), (code << CORR_BITS) | np.maximum(corr, 0), -1)

    def add(self, records: Records) -> None:
        """One batch of calls (``key`` -1: none), in event order."""
        run = records[records["key"] >= 0]
        run = run[np.argsort(run["key"], kind="stable")]
        if not len(run):
            return
        keys = run["key"]
        first = np.concatenate(([True], keys[1:] != keys[:-1]))
        self.duplicates += int((~first).sum()) + int((self._find(keys[first])["pos"] >= 0).sum())
        procs = keys >> CORR_BITS
        cuts = [0, *(np.flatnonzero(procs[1:] != procs[:-1]) + 1).tolist(), len(keys)]
        for a, b in itertools.pairwise(cuts):
            self._seg.lo.append(int(keys[a]))
            self._seg.hi.append(int(keys[b - 1]))
            self._seg.offset.append(self._records + a)
            self._seg.count.append(b - a)
            self._seg.samples.append(keys[a:b:SAMPLE].copy())
        self._lo, self._hi = np.array(self._seg.lo, np.int64), np.array(self._seg.hi, np.int64)
        data, at = memoryview(run.tobytes()), self._records * RECORD.itemsize
        while data:
            done = os.pwrite(self._file.fileno(), data, at)
            data, at = data[done:], at + done
        self._records += len(run)

    def find(self, keys: I64) -> Records:
        """For each key, the record of the first call with it (``pos`` -1: none)."""
        return self._find(keys)

    def _find(self, keys: I64) -> Records:
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
                got = self._search(s, keys[probe])
                hit = got["pos"] >= 0
                out[probe[hit]] = got[hit]
        return out

    def _search(self, s: int, keys: I64) -> Records:
        """The records of segment ``s`` with these keys (first of equal ones), ``pos`` -1 where none."""
        samples = self._seg.samples[s]
        lo = max(int(np.searchsorted(samples, keys.min(), "left")) - 1, 0) * SAMPLE
        hi = min((int(np.searchsorted(samples, keys.max(), "right")) + 1) * SAMPLE, self._seg.count[s])
        chunk = self._read(self._seg.offset[s] + lo, hi - lo)
        at = np.minimum(np.searchsorted(chunk["key"], keys, "left"), len(chunk) - 1)
        got = chunk[at]
        got["pos"] = np.where(got["key"] == keys, got["pos"], -1)
        return got

    def _read(self, first: int, count: int) -> Records:
        data = os.pread(self._file.fileno(), count * RECORD.itemsize, first * RECORD.itemsize)
        records: Records = np.frombuffer(data, RECORD).copy()
        return records


def nothing(n: int) -> Records:
    """``n`` records of no call: ``pos``, ``op_eid`` and ``op_name`` -1."""
    out = np.zeros(n, RECORD)
    out["pos"] = out["op_eid"] = out["op_name"] = -1
    return out
