"""Links between the rows of an Nsight Systems export, in numpy, a batch of rows at a time.

- launch: GPU work -> the CUDA API call that launched it, by correlation id *within the
  process* (``k.globalPid = r.globalTid & 0xFFFFFFFFFF000000``), as ``nsys stats
  --report cuda_kern_exec_trace`` joins them (:mod:`.launches` holds the calls); the queue
  and wall times follow from it.
- op: API calls (and, through their launch, GPU rows) -> the innermost NVTX push/pop range
  that encloses the call on the calling thread (:class:`Ranges`).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from traceconv.readers.arrow_util import I64, from_codes
from traceconv.readers.enclosing import innermost_enclosing
from traceconv.readers.gpu_times import queue_and_wall
from traceconv.readers.nsys.launches import Calls
from traceconv.readers.nsys.parts import LOW24, NO_TIME, Col, DictCol, Part, arrow, as_dict


class Vocabulary:
    """Strings seen in the dictionaries of several batches, as codes of one list (the first
    batch's dictionary, in its order, then what later ones add)."""

    def __init__(self) -> None:
        self.values: list[str | None] = []
        self._code: dict[str | None, int] = {}
        self._array: pa.Array | None = None  # ``values`` as a string array, while none is added

    def codes(self, arr: Col) -> I64:
        """Each row's code (-1: null) of a dictionary column."""
        enc = as_dict(arr)
        lut = np.array([self._add(v) for v in enc.dictionary.to_pylist()] + [-1], dtype=np.int64)
        return lut[np.asarray(enc.indices.fill_null(-1), dtype=np.int64)]

    def _add(self, value: str | None) -> int:
        code = self._code.get(value)
        if code is None:
            code = self._code[value] = len(self.values)
            self.values.append(value)
            self._array = None
        return code

    def array(self, codes: I64) -> DictCol:
        """Dictionary column of ``codes`` (-1: null) with every value seen as its dictionary."""
        if self._array is None:
            self._array = pa.array(self.values, pa.string())
        return as_dict(from_codes(codes, self._array))


class Ranges:
    """NVTX push/pop ranges (thread, start, end, event id, name code), added in start order."""

    def __init__(self, names: Vocabulary) -> None:
        self.names = names
        self._parts: list[tuple[I64, ...]] = []
        self._all: tuple[I64, ...] | None = None

    def add(self, part: Part, first_id: int, codes: I64) -> None:
        """The ranges of one batch of NVTX rows (``codes``: their name codes)."""
        if part.push_pop is None:
            return
        idx = np.flatnonzero(part.push_pop)
        self._parts.append((part.gtid[idx], part.start[idx], part.end[idx], first_id + idx, codes[idx]))
        self._all = None

    def _arrays(self) -> tuple[I64, ...]:
        if self._all is None:
            empty = np.zeros(0, dtype=np.int64)
            self._all = tuple(np.concatenate(cols) for cols in zip(*self._parts, strict=True)) or (empty,) * 5
            self._parts = [self._all] if len(self._all[0]) else []
        return self._all

    def __len__(self) -> int:
        return len(self._arrays()[0])

    def find(self, gtid: I64, time: I64) -> tuple[I64, I64]:
        """(event id, name code) of the innermost range around each (thread, time), -1 where none.

        Only the ranges that could hold one of the queries are offered (those that start by the
        last query and end at or after the first), in their order: the result is the search of
        every range (the same ties), at a cost that does not grow with the ranges before."""
        g, start, end, eid, name = self._arrays()
        valid = gtid >= 0
        none = np.full(len(gtid), -1, dtype=np.int64)
        if not len(g) or not valid.any():
            return none, none.copy()
        hi = int(np.searchsorted(start, int(time[valid].max()), "right"))
        cand = np.flatnonzero(end[:hi] >= int(time[valid].min()))
        pos = innermost_enclosing(g[cand], start[cand], end[cand], gtid, time)
        pos = np.where(valid & (pos >= 0), cand[np.maximum(pos, 0)] if len(cand) else 0, -1)
        ok = pos >= 0
        return np.where(ok, eid[np.maximum(pos, 0)], -1), np.where(ok, name[np.maximum(pos, 0)], -1)

    def columns(self, eid: I64, name: I64) -> dict[str, Col]:
        """``op_event_id`` and ``op_name`` from :meth:`find`'s answers."""
        ok = eid >= 0
        if not len(self):
            nothing = pa.array(np.zeros(len(eid), np.int64), mask=~ok)
            return {"op_event_id": nothing, "op_name": pa.nulls(len(eid), pa.string())}
        return {"op_event_id": pa.array(np.where(ok, eid, 0), mask=~ok), "op_name": self.names.array(name)}


def launch_columns(calls: Calls, gpu: Part, first_id: int, offset: int, names: Vocabulary) -> dict[str, Col]:
    """launch_* columns plus queue_ns and wall_ns (:mod:`traceconv.readers.gpu_times`) from each
    GPU row's call (``pos`` -1: none)."""
    missing = calls["pos"] < 0
    l_start, l_end, gtid = calls["start"], calls["end"], calls["gtid"]
    launch_start = pa.array(l_start + offset, mask=missing)
    launch_end = pa.array(l_end + offset, mask=missing | (l_end == NO_TIME))
    start, end = (pa.array(t + offset, mask=t == NO_TIME) for t in (gpu.start, gpu.end))
    queue, wall = queue_and_wall(start, end, launch_start, launch_end)
    return {
        "launch_event_id": pa.array(first_id + np.maximum(calls["pos"], 0), mask=missing),
        "launch_name": names.array(np.where(missing, -1, calls["name"])),
        "launch_start_ns": launch_start,
        "launch_end_ns": launch_end,
        "launch_tid": arrow(gtid & LOW24, missing | (gtid < 0)),
        "queue_ns": queue,
        "wall_ns": wall,
    }
