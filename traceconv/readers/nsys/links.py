"""Links between the rows of an Nsight Systems export, in numpy.

- launch: GPU work -> the CUDA API call that launched it, by correlation id *within the
  process* (``k.globalPid = r.globalTid & 0xFFFFFFFFFF000000``), as ``nsys stats
  --report cuda_kern_exec_trace`` joins them; the queue and wall times follow from it.
- op: API calls (and, through their launch, GPU rows) -> the innermost NVTX push/pop range
  that encloses the call on the calling thread.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from traceconv.readers.arrow_util import I64
from traceconv.readers.enclosing import innermost_enclosing
from traceconv.readers.gpu_times import queue_and_wall
from traceconv.readers.nsys.parts import LOW24, NO_TIME, NONE, Col, Part, arrow, distinct
from traceconv.readers.sorted_keys import lookup

_CORR_BITS = 40  # a launch key is (process code << 40) | correlation id
# Keys of rows that cannot be linked (no correlation id, or one past 40 bits): negative, so
# no valid key equals them, and different on the two sides, so they never equal each other.
_NO_API_KEY, _NO_GPU_KEY = -2, -3


@dataclass
class Launches:
    """The launching API calls: a Part of CUPTI_ACTIVITY_KIND_RUNTIME and its first event id."""

    part: Part
    first_id: int


@dataclass
class Ranges:
    """NVTX push/pop ranges: thread, start, end and event id of each."""

    gtid: I64
    start: I64
    end: I64
    event_id: I64
    name: Col

    @classmethod
    def of(cls, part: Part | None, first_id: int) -> Ranges:
        if part is None or part.push_pop is None:
            empty = np.zeros(0, dtype=np.int64)
            return cls(empty, empty, empty, empty, pa.array([], pa.string()))
        idx = np.flatnonzero(part.push_pop)
        return cls(part.gtid[idx], part.start[idx], part.end[idx], first_id + idx, part.cols["name"].take(arrow(idx)))

    def enclosing(self, gtid: I64, time: I64) -> dict[str, Col]:
        """``op_event_id`` and ``op_name`` for queries (thread, time); NONE thread -> null."""
        pos = innermost_enclosing(self.gtid, self.start, self.end, gtid, time)
        pos = np.where(gtid >= 0, pos, -1)
        ok = pos >= 0
        event_id = pa.array(np.where(ok, self.event_id[np.maximum(pos, 0)] if len(self.event_id) else 0, 0), mask=~ok)
        name = self.name.take(arrow(np.maximum(pos, 0), ~ok)) if len(self.name) else pa.nulls(len(pos), pa.string())
        return {"op_event_id": event_id, "op_name": name}


def _process_keys(api_gpid: I64, gpu_gpid: I64) -> tuple[I64, I64]:
    """Small process codes shared by both sides (NONE stays negative)."""
    _, codes = np.unique(np.concatenate([api_gpid, gpu_gpid]), return_inverse=True)
    codes = codes.reshape(-1).astype(np.int64)
    return codes[: len(api_gpid)], codes[len(api_gpid) :]


def launch_index(launches: Launches, gpu: Part) -> tuple[I64, list[str]]:
    """For each GPU row, the row index of its launching call in ``launches.part``, or -1."""
    api = launches.part
    notes: list[str] = []
    by_process = bool((gpu.gpid >= 0).any())
    if by_process:
        api_proc, gpu_proc = _process_keys(api.gpid, gpu.gpid)
    else:
        api_proc, gpu_proc = np.zeros(api.n, dtype=np.int64), np.zeros(gpu.n, dtype=np.int64)
        if len(distinct(api.gpid)) > 1:
            notes.append(f"{gpu.table} has no globalPid: GPU rows were linked to API calls by correlation id alone")
    limit = 1 << _CORR_BITS
    api_ok = (api.corr > 0) & (api.corr < limit)
    api_key = np.where(api_ok, (api_proc << _CORR_BITS) | np.maximum(api.corr, 0), _NO_API_KEY)
    gpu_ok = (gpu.corr > 0) & (gpu.corr < limit)
    gpu_key = np.where(gpu_ok, (gpu_proc << _CORR_BITS) | np.maximum(gpu.corr, 0), _NO_GPU_KEY)
    valid_keys = api_key[api_ok]
    duplicates = len(valid_keys) - len(distinct(valid_keys))
    if duplicates:
        notes.append(
            f"{duplicates:,} CUDA API calls repeat a correlation id of their process; "
            "GPU work was linked to the first of them"
        )
    return lookup(gpu_key, api_key), notes


def launch_columns(launches: Launches, gpu: Part, pos: I64, offset: int) -> dict[str, Col]:
    """launch_* columns plus queue_ns and wall_ns (:mod:`traceconv.readers.gpu_times`)."""
    api = launches.part
    ok = pos >= 0
    at = np.maximum(pos, 0)
    missing = ~ok
    if api.n == 0:
        nothing = np.zeros(gpu.n, dtype=np.int64)
        return {"launch_event_id": pa.array(nothing, mask=np.ones(gpu.n, dtype=bool))}
    l_start, l_end = api.start[at], api.end[at]
    launch_start = pa.array(l_start + offset, mask=missing)
    launch_end = pa.array(l_end + offset, mask=missing | (l_end == NO_TIME))
    start, end = (pa.array(t + offset, mask=t == NO_TIME) for t in (gpu.start, gpu.end))
    queue, wall = queue_and_wall(start, end, launch_start, launch_end)
    return {
        "launch_event_id": pa.array(launches.first_id + at, mask=missing),
        "launch_name": api.cols["name"].take(arrow(at, missing)),
        "launch_start_ns": launch_start,
        "launch_end_ns": launch_end,
        "launch_tid": pa.array(api.gtid[at] & LOW24, mask=missing | (api.gtid[at] < 0)),
        "queue_ns": queue,
        "wall_ns": wall,
    }


def launch_threads(launches: Launches, pos: I64) -> tuple[I64, I64]:
    """(global thread id, start) of each GPU row's launching call; NONE where there is none."""
    api = launches.part
    if api.n == 0:
        none = np.full(len(pos), NONE, dtype=np.int64)
        return none, none
    at = np.maximum(pos, 0)
    return np.where(pos >= 0, api.gtid[at], NONE), np.where(pos >= 0, api.start[at], NONE)
