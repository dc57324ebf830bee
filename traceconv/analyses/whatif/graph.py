"""The dependency graph of a process's steps, as arrays: its CUDA calls in order, the GPU work each
launched, the calls that waited for the GPU, and where the host's time went between calls.

The host is one timeline (a PyTorch process's threads take turns: the main thread waits while
autograd's thread runs the backward pass), its CUDA calls in the order they started. A GPU row
belongs to the call that launched it and to its stream (device and stream), in the order it ran.
A call *waits* when it blocks the host until GPU work has finished: a synchronisation, a
synchronous copy, a pageable copy being staged (the call returns only after its own copy ended).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from traceconv.analyses import intervals as I
from traceconv.analyses.prepare import GPU_WORK
from traceconv.analyses.source import Source, literal
from traceconv.analyses.steps import Steps

GPU_CLASSES = ("compute", "copy", "communication")  # a GPU row's class on the critical path


@dataclass(frozen=True)
class Coded:
    """Repeated strings as codes into their distinct values (a row's value: ``values[codes[row]]``,
    -1: null): millions of calls cost four bytes each, not a Python string."""

    codes: npt.NDArray[np.int32]
    values: list[str | None]

    def __len__(self) -> int:
        return len(self.codes)

    def where(self, test: Callable[[str], bool]) -> I.Bools:
        """The rows whose value passes ``test`` (asked once per distinct value)."""
        hit = np.array([v is not None and test(v) for v in self.values] + [False], dtype=bool)
        return hit[self.codes]  # -1 (null) picks the last entry: False

    def eq(self, value: str) -> I.Bools:
        return self.where(lambda v: v == value)

    def matches(self, pattern: str) -> I.Bools:
        regex = re.compile(pattern)
        return self.where(lambda v: bool(regex.search(v)))

    def at(self, rows: I.I64) -> list[str | None]:
        values = [*self.values, None]
        return [values[c] for c in self.codes[rows]]


COMM = "(lower(name) LIKE '%nccl%' OR lower(name) LIKE '%rccl%')"


@dataclass(frozen=True)
class Calls:
    """The process's CUDA calls in start order."""

    start: I.I64
    end: I.I64
    name: Coded
    sync: I.Bools  # a blocking synchronisation (cuda*Synchronize, synchronous cudaMemcpy)
    staging: I.Bools  # a sync that waits for a pageable HtoD copy to be staged (or the copy call itself)


@dataclass(frozen=True)
class Gpu:
    """The GPU rows the process launched (and those with no launch in the trace), in start order."""

    start: I.I64
    end: I.I64
    call: I.I64  # index into Calls of the launching call, -1: none in the trace
    lane: I.I64  # the (device, stream) the row ran on, as a number
    device: I.I64
    klass: I.I64  # index into GPU_CLASSES
    kind: Coded  # kernel, memcpy, memset, graph
    name: Coded
    copy_kind: Coded  # HtoD, DtoH ... for copies
    op: Coded  # the operator (or range) that launched it


@dataclass(frozen=True)
class Graph:
    calls: Calls
    gpu: Gpu
    op_start: I.I64  # the process's CPU operators and annotations (steps aside)
    op_end: I.I64
    op_name: Coded
    ranges: tuple[I.I64, I.I64]  # their union: the host's time inside some operator or annotation
    steps: Steps

    def op_ranges(self, pattern: str) -> tuple[I.I64, I.I64]:
        """The union of the operators (and annotations) whose name matches ``pattern`` (a regex)."""
        hit = self.op_name.matches(pattern)
        return I.union(self.op_start[hit], self.op_end[hit])


def build(source: Source, steps: Steps) -> Graph:
    """The graph of the process whose steps ``steps`` are (its trace and process)."""
    where = _process(steps)
    # Every string column comes as a code into one table of the distinct strings: the 16x bench
    # export's 2M kernel names and 4.2M call names as strings were most of the graph's memory.
    source.table(
        "wi_strings",
        "SELECT v, CAST(row_number() OVER () - 1 AS INTEGER) AS code FROM (SELECT DISTINCT v FROM ("
        "SELECT CAST(name AS VARCHAR) AS v FROM events UNION ALL SELECT CAST(op_name AS VARCHAR) FROM events "
        "UNION ALL SELECT CAST(kind AS VARCHAR) FROM events UNION ALL SELECT CAST(copy_kind AS VARCHAR) FROM events"
        ") WHERE v IS NOT NULL)",
    )
    strings = source.arrow("SELECT v FROM wi_strings ORDER BY code")["v"].to_pylist()
    calls, ids = _calls(source, where, strings)
    gpu = _gpu(source, where, strings, ids)
    del ids
    op_c, op_j = _code("r.name", "c_name")
    ops = _Columns(
        source.batches(
            f"SELECT r.start_ns, coalesce(r.end_ns, r.start_ns) AS end_ns, {op_c} FROM events r "
            f"LEFT JOIN labels l ON l.name = r.name{op_j} WHERE r.kind IN ('cpu_op', 'nvtx') AND r.device IS NULL "
            f"AND r.start_ns IS NOT NULL AND NOT coalesce(l.is_step, false){where('r', host=True)}"
        )
    )
    source.run("DROP TABLE wi_strings")
    op_start, op_end = ops.ints("start_ns"), ops.ints("end_ns")
    return Graph(
        calls=calls,
        gpu=gpu,
        op_start=op_start,
        op_end=np.maximum(op_end, op_start),
        op_name=ops.coded("c_name", strings),
        ranges=I.union(op_start, np.maximum(op_end, op_start)),
        steps=steps,
    )


class _Columns:
    """A query's result read a batch at a time into arrays, each column joined when taken: neither
    DuckDB's whole result nor an Arrow table of it is held beside the arrays made of it."""

    def __init__(self, batches: Iterable[pa.RecordBatch]) -> None:
        self._parts: dict[str, list[np.ndarray]] = {}
        for batch in batches:
            for name, col in zip(batch.schema.names, batch.columns, strict=True):
                self._parts.setdefault(name, []).append(col.to_numpy(zero_copy_only=False))

    def _take(self, name: str, dtype: type) -> np.ndarray:
        parts = self._parts.pop(name, [])
        return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)

    def ints(self, name: str) -> I.I64:
        out: I.I64 = self._take(name, np.int64)
        return out

    def bools(self, name: str) -> I.Bools:
        out: I.Bools = self._take(name, np.bool_)
        return out

    def coded(self, name: str, strings: list[str | None]) -> Coded:
        return Coded(self._take(name, np.int32), strings)


def _code(column: str, alias: str) -> tuple[str, str]:
    """The select item and the join that give ``column``'s code into ``wi_strings`` (-1: null) as ``alias``."""
    return (
        f"coalesce({alias}.code, -1) AS {alias}",
        f" LEFT JOIN wi_strings {alias} ON {alias}.v = CAST({column} AS VARCHAR)",
    )


def _calls(source: Source, where: Callable[..., str], strings: list[str | None]) -> tuple[Calls, I.I64]:
    """The process's CUDA calls, and their event ids (for the GPU rows' launches)."""
    name_c, name_j = _code("a.name", "c_name")
    calls = _Columns(
        source.batches(
            f"SELECT a.event_id, a.start_ns, coalesce(a.end_ns, a.start_ns) AS end_ns, {name_c}, "
            "s.event_id IS NOT NULL AS sync, coalesce(s.staging, false) AS staging FROM events a "
            "LEFT JOIN sync_calls s ON s.event_id = a.event_id AND s.trace_id = coalesce(a.trace_id, '') "
            f"AND NOT s.activity{name_j} WHERE a.kind = 'cuda_api' AND a.start_ns IS NOT NULL{where('a')} "
            "ORDER BY a.start_ns, a.event_id"
        )
    )
    ids = calls.ints("event_id")
    start, end, name = calls.ints("start_ns"), calls.ints("end_ns"), calls.coded("c_name", strings)
    return Calls(start, end, name, calls.bools("sync"), calls.bools("staging")), ids


def _gpu(source: Source, where: Callable[..., str], strings: list[str | None], ids: I.I64) -> Gpu:
    """The GPU rows, each with the index of its launching call among the calls (event ids ``ids``)."""
    columns = [_code(f"g.{c}", f"c_{c}") for c in ("kind", "name", "copy_kind", "op_name")]
    gpu = _Columns(
        source.batches(
            "SELECT g.start_ns, g.end_ns, coalesce(g.launch_event_id, -1) AS launch_event_id, "
            f"coalesce(g.device, -1) AS device, coalesce(g.stream, g.tid, -1) AS stream, "
            f"{', '.join(c for c, _ in columns)}, CASE WHEN g.kind IN ('memcpy', 'memset') THEN 1 "
            f"WHEN {COMM.replace('name', 'g.name')} THEN 2 ELSE 0 END AS klass FROM events g"
            f"{''.join(j for _, j in columns)} WHERE {GPU_WORK.replace('kind', 'g.kind')} AND g.start_ns IS NOT NULL "
            f"AND g.end_ns IS NOT NULL{where('g', gpu=True)} ORDER BY g.start_ns, g.event_id"
        )
    )
    launch = gpu.ints("launch_event_id")
    call = np.full(len(launch), -1, np.int64)
    if len(ids):
        order = np.argsort(ids, kind="stable")
        at = np.minimum(np.searchsorted(ids[order], launch), len(ids) - 1)
        found = ids[order[at]] == launch
        call[found] = order[at[found]]
    device = gpu.ints("device")
    return Gpu(
        gpu.ints("start_ns"),
        gpu.ints("end_ns"),
        call,
        _lanes(device, gpu.ints("stream")),
        device,
        gpu.ints("klass"),
        gpu.coded("c_kind", strings),
        gpu.coded("c_name", strings),
        gpu.coded("c_copy_kind", strings),
        gpu.coded("c_op_name", strings),
    )


def _process(steps: Steps) -> Callable[..., str]:
    """The condition that a row belongs to the steps' trace (and process, where they name one)."""

    def where(alias: str, gpu: bool = False, host: bool = False) -> str:
        col = f"{alias}." if alias else ""
        out = ""
        if steps.trace_id is not None:
            out += f" AND coalesce({col}trace_id, '') = {literal(steps.trace_id)}"
        if steps.pid is not None and not gpu:
            out += f" AND {col}pid = {int(steps.pid)}"
        elif steps.pid is not None:  # GPU rows: in an Nsight Systems export, pid is the process
            out += f" AND ({col}source <> 'nsys' OR {col}pid = {int(steps.pid)})"
        return out

    return where


def _lanes(device: I.I64, stream: I.I64) -> I.I64:
    """Each row's (device, stream) as a number, the pairs numbered in their sorted order (as
    ``np.unique(..., axis=0)`` numbers them, which sorts rows of a 2-column array several times slower)."""
    if not len(device):
        return np.zeros(0, np.int64)
    _, dev = np.unique(device, return_inverse=True)
    streams, st = np.unique(stream, return_inverse=True)
    _, lane = np.unique(dev.astype(np.int64) * len(streams) + st, return_inverse=True)
    return np.asarray(lane, np.int64).reshape(-1)


def _ints(col: object) -> I.I64:
    return np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.int64)  # type: ignore[attr-defined]
