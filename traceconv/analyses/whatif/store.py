"""The graph of a process's steps (:mod:`.graph`) kept in the Source's database, and read back a
window of calls at a time.

The process's CUDA calls and GPU rows are written once to tables of the Source's database file
(each GPU row with its launching call's start, its stream and the row before it on its stream),
and what the replay needs of the whole process is worked out there: the usual launch delay and
stream gap, and the rows that waited for a collective on another stream. A replay then holds one
window of calls and the rows they launched at a time (:meth:`Store.windows`), so that its memory
does not grow with the trace. A window is the calls that start in a span of time, and ends at a
synchronisation, where the replay's segments end too (:mod:`.schedule`): its rows run on each
stream after those of the windows before, as in one replay of the whole. Calls and rows are known
by their event ids (a trace's row numbers).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from traceconv.analyses import intervals as I
from traceconv.analyses.source import Source, literal, one_of
from traceconv.analyses.steps import Steps
from traceconv.analyses.vocabulary import GPU_WORK_KINDS, comm_kernels
from traceconv.analyses.whatif.graph import NONE, Calls, Coded, Gpu, Graph, Ops

WINDOW_CALLS = 1 << 17  # a window's calls, about: it ends at the first synchronisation after them
CUT_TRIES = 4  # the synchronisations tried, in order, to end a window
SAMPLED_LAUNCHES = 50_000  # launches looked at, about, to tell whether the operators enclose them
DEP_GAP_NS = 10_000  # a row that starts this soon after a collective on another stream ended waited for it
_ROW = "id, s, e, launch, lane, device, klass, kind, name, copy_kind, op, prev_end"  # a GPU row, as read
_NUMBERS = itertools.count()  # each Store's tables are its own (one per rank)


@dataclass(frozen=True)
class Store:
    """A process's calls and GPU rows in the Source's database, and what a window of them needs of
    the whole (see the module)."""

    source: Source
    prefix: str  # its tables' names start so
    steps: Steps
    strings: list[str | None]  # what the string columns' codes stand for
    ops: Ops
    rows: int  # GPU rows
    cuts: list[int]  # the start of each window's first call but the first's
    usual: tuple[int, int]
    lane_device: I.I64
    waited: I.I64  # the rows that others wait for (sorted)
    dep_rows: I.I64  # the rows that waited for a collective on another stream (sorted), ...
    dep: I.I64  # ... the collective's row ...
    dep_gap: I.I64  # ... and from its end to their start

    def windows(self, whole: bool = False) -> Iterator[Graph]:
        """The windows in order; ``whole``: one window of every call."""
        cuts: list[int | None] = [None, *([] if whole else self.cuts), None]
        before: int | None = None  # the start of the window before's last call
        for k in range(len(cuts) - 1):
            g = self._window(cuts[k], cuts[k + 1], before)
            yield g
            before = int(g.calls.start[-1]) if len(g.calls.start) else before

    def _window(self, t0: int | None, t1: int | None, before: int | None) -> Graph:
        """The calls that start in ``[t0, t1)`` (None: without bound), and the GPU rows they launched
        or that go with them (a row with no launching call: the next call that started at or after it;
        ``before``: the start of the window before's last call)."""
        p = self.prefix
        calls = _Columns(
            self.source.batches(
                f"SELECT id, s, e, name, sync, staging FROM {p}_calls WHERE {_span('s', t0, t1)} ORDER BY s, id"
            )
        )
        ids = calls.ints("id")
        c = Calls(
            calls.ints("s"),
            calls.ints("e"),
            calls.coded("name", self.strings),
            calls.bools("sync"),
            calls.bools("staging"),
        )
        lo = f"s > {before}" if before is not None else "true"
        hi = f"s <= {int(c.start[-1])}" if t1 is not None and len(c.start) else "true"
        rows = _Columns(
            self.source.batches(
                f"SELECT * FROM (SELECT {_ROW} FROM {p}_gpu WHERE {_span('call_s', t0, t1)} UNION ALL "
                f"SELECT {_ROW} FROM {p}_gpu WHERE call_s IS NULL AND {lo} AND {hi}) ORDER BY s, id"
            )
        )
        row = rows.ints("id")
        at = np.minimum(np.searchsorted(self.dep_rows, row), max(len(self.dep_rows) - 1, 0))
        waits = (self.dep_rows[at] == row) if len(self.dep_rows) else np.zeros(len(row), np.bool_)
        gpu = Gpu(
            start=rows.ints("s"),
            end=rows.ints("e"),
            call=_launching(ids, rows.ints("launch")),
            lane=rows.ints("lane"),
            device=rows.ints("device"),
            klass=rows.ints("klass"),
            kind=rows.coded("kind", self.strings),
            name=rows.coded("name", self.strings),
            copy_kind=rows.coded("copy_kind", self.strings),
            op=rows.coded("op", self.strings),
            row=row,
            prev_end=rows.ints("prev_end"),
            dep=np.where(waits, self.dep[at] if len(self.dep) else -1, -1),
            dep_gap=np.where(waits, self.dep_gap[at] if len(self.dep_gap) else 0, 0),
        )
        return Graph(c, gpu, self.ops, self.steps, t0 is None, self.usual, self.lane_device, self.waited)


def store(source: Source, steps: Steps) -> Store:
    """The process whose steps ``steps`` are (its trace and process), written to the Source's database."""
    where = _process(steps)
    p = f"wi{next(_NUMBERS)}"
    # Every string column comes as a code into one table of the distinct strings: the 16x bench
    # export's 2M kernel names and 4.2M call names as strings were most of the graph's memory.
    source.table(
        f"{p}_strings",
        "SELECT v, CAST(row_number() OVER () - 1 AS INTEGER) AS code FROM (SELECT DISTINCT v FROM ("
        "SELECT CAST(name AS VARCHAR) AS v FROM events UNION ALL SELECT CAST(op_name AS VARCHAR) FROM events "
        "UNION ALL SELECT CAST(kind AS VARCHAR) FROM events UNION ALL SELECT CAST(copy_kind AS VARCHAR) FROM events"
        ") WHERE v IS NOT NULL)",
    )
    strings = source.arrow(f"SELECT v FROM {p}_strings ORDER BY code")["v"].to_pylist()
    _calls(source, p, where)
    _gpu(source, p, where, steps)
    rows = int(source.scalar(f"SELECT count(*) FROM {p}_gpu"))
    ops = _ops(source, p, where, strings, rows)
    source.run(f"DROP TABLE {p}_strings")
    usual = _usual(source, p)
    lane_device = _ints(source.arrow(f"SELECT DISTINCT lane, device FROM {p}_gpu ORDER BY lane")["device"])
    dep_rows, dep, dep_gap = _collective_waits(source, p, usual)
    return Store(
        source,
        p,
        steps,
        strings,
        ops,
        rows,
        _cuts(source, p),
        usual,
        lane_device,
        np.unique(dep),
        dep_rows,
        dep,
        dep_gap,
    )


def _code(column: str, alias: str, p: str) -> tuple[str, str]:
    """The select item and the join that give ``column``'s code into the strings (-1: null) as ``alias``."""
    return (
        f"coalesce({alias}.code, -1) AS {alias}",
        f" LEFT JOIN {p}_strings {alias} ON {alias}.v = CAST({column} AS VARCHAR)",
    )


def _calls(source: Source, p: str, where: Callable[..., str]) -> None:
    """The process's CUDA calls (``id``: their event id); their order is their start's, then their id's."""
    name_c, name_j = _code("a.name", "name", p)
    source.table(
        f"{p}_calls",
        f"SELECT a.event_id AS id, a.start_ns AS s, coalesce(a.end_ns, a.start_ns) AS e, {name_c}, "
        "s.event_id IS NOT NULL AS sync, coalesce(s.staging, false) AS staging FROM events a "
        "LEFT JOIN sync_calls s ON s.event_id = a.event_id AND s.trace_id = coalesce(a.trace_id, '') "
        f"AND NOT s.activity{name_j} WHERE a.kind = 'cuda_api' AND a.start_ns IS NOT NULL{where('a')}",
    )


def _gpu(source: Source, p: str, where: Callable[..., str], steps: Steps) -> None:
    """The GPU rows (``id``: their event id; their order is their start's, then their id's), each with
    its launching call's start (``call_s``, null: none among the process's calls), its lane (the
    (device, stream) pairs numbered in their sorted order) and the end of the row before it on its lane."""
    columns = [_code(f"g.{c}", n, p) for c, n in (("kind", "kind"), ("name", "name"), ("copy_kind", "copy_kind"))]
    columns.append(_code("g.op_name", "op", p))
    # A row's launching call is one of the process's calls, whose start the row carries, unless the
    # trace holds other processes' calls: then it is looked up among the process's.
    others = steps.pid is not None and source.scalar(
        f"SELECT count(*) FROM events a WHERE a.kind = 'cuda_api' AND a.pid <> {int(steps.pid)}"
        f"{_process(dataclasses.replace(steps, pid=None))('a')}"
    )
    call_s, calls = ("c.s", f" LEFT JOIN {p}_calls c ON c.id = g.launch") if others else ("g.launch_start_ns", "")
    source.table(
        f"{p}_gpu",
        f"WITH g AS (SELECT g.event_id, g.start_ns AS s, g.end_ns AS e, {call_s} AS call_s, "
        "coalesce(g.launch_event_id, -1) AS launch, coalesce(g.device, -1) AS device, "
        f"coalesce(g.stream, g.tid, -1) AS stream, {', '.join(c for c, _ in columns)}, "
        "CASE WHEN g.kind IN ('memcpy', 'memset') THEN 1 "
        f"WHEN {one_of('g.name', comm_kernels(source))} THEN 2 ELSE 0 END AS klass FROM events g"
        f"{''.join(j for _, j in columns)}{calls} WHERE g.kind IN {GPU_WORK_KINDS} "
        f"AND g.start_ns IS NOT NULL AND g.end_ns IS NOT NULL{where('g', gpu=True)}), "
        "lanes AS (SELECT device, stream, CAST(row_number() OVER (ORDER BY device, stream) - 1 AS BIGINT) AS lane "
        "FROM (SELECT DISTINCT device, stream FROM g)) "
        "SELECT g.event_id AS id, g.s, g.e, g.launch, g.call_s, l.lane, g.device, g.klass, g.kind, g.name, "
        "g.copy_kind, g.op, "
        f"coalesce(lag(g.e) OVER (PARTITION BY l.lane ORDER BY g.s, g.event_id), {NONE}) AS prev_end "
        "FROM g JOIN lanes l ON l.device = g.device AND l.stream = g.stream",
    )


def _ops(source: Source, p: str, where: Callable[..., str], strings: list[str | None], rows: int) -> Ops:
    """The process's operators and annotations, and whether they enclose its launches (``rows``: its GPU rows)."""
    name_c, name_j = _code("r.name", "name", p)
    ops = _Columns(
        source.batches(
            f"SELECT r.start_ns, coalesce(r.end_ns, r.start_ns) AS end_ns, {name_c} FROM events r "
            f"LEFT JOIN labels l ON l.name = r.name{name_j} WHERE r.kind IN ('cpu_op', 'nvtx') AND r.device IS NULL "
            f"AND r.start_ns IS NOT NULL AND NOT coalesce(l.is_step, false){where('r', host=True)}"
        )
    )
    start, end = ops.ints("start_ns"), ops.ints("end_ns")
    end = np.maximum(end, start)
    ranges = I.union(start, end)
    # the launching calls' starts, a sample spread over the process, inside the ranges' union?
    every = max(rows // SAMPLED_LAUNCHES, 1)
    at = _ints(source.arrow(f"SELECT call_s FROM {p}_gpu WHERE call_s IS NOT NULL AND id % {every} = 0")["call_s"])
    enclose = bool(I.inside(at, *ranges).mean() >= 0.5) if len(at) else True
    return Ops(start, end, ops.coded("name", strings), ranges, enclose)


_LAUNCHED = "SELECT *, s - call_s AS since FROM {p}_gpu WHERE call_s IS NOT NULL"


def _usual(source: Source, p: str) -> tuple[int, int]:
    """The usual delays: from a call's start to its row's start where the stream was free when the call
    began, and from a row's end to the next where the stream was busy when that one's call began."""
    rows = _LAUNCHED.format(p=p)
    free, busy = (
        source.arrow(
            f"SELECT median(since) FILTER (WHERE prev_end = {NONE} OR prev_end <= call_s) AS free, "
            f"median(s - prev_end) FILTER (WHERE prev_end <> {NONE} AND prev_end > call_s AND s >= prev_end) AS busy "
            f"FROM ({rows})"
        )
        .to_pylist()[0]
        .values()
    )
    return int(free) if free is not None else 0, int(busy) if busy is not None else 0  # as int(np.median(...))


def _cuts(source: Source, p: str) -> list[int]:
    """Where the windows begin, but the first: right after a synchronisation (its start and a
    nanosecond), about every :data:`WINDOW_CALLS` calls. A synchronisation that shares its start
    with a call after it in the calls' order cannot end a window."""
    n = int(source.scalar(f"SELECT count(*) FROM {p}_calls"))
    if n <= WINDOW_CALLS:
        return []
    parts = -(-n // WINDOW_CALLS)
    marks = source.scalar(f"SELECT approx_quantile(s, {[k / parts for k in range(1, parts)]}) FROM {p}_calls")
    syncs = source.arrow(f"SELECT s, id FROM {p}_calls WHERE sync ORDER BY s, id")
    start, ids = _ints(syncs["s"]), _ints(syncs["id"])
    tried = [list(range(k, min(k + CUT_TRIES, len(start)))) for k in np.searchsorted(start, marks).tolist()]
    starts = sorted({int(start[k]) for ks in tried for k in ks})
    if not starts:
        return []
    last = _pairs(
        source.arrow(f"SELECT s, max(id) FROM {p}_calls WHERE s IN ({', '.join(map(str, starts))}) GROUP BY s")
    )
    cuts: list[int] = []
    for ks in tried:
        ok = [int(start[k]) + 1 for k in ks if last[int(start[k])] == ids[k]]
        if ok and (not cuts or ok[0] > cuts[-1]):
            cuts.append(ok[0])
    return cuts


def _collective_waits(source: Source, p: str, usual: tuple[int, int]) -> tuple[I.I64, I.I64, I.I64]:
    """The rows that waited on the GPU for a collective on another stream of their device (the
    module :mod:`.replay` says how they are found): theirs, the collective's, and the gap between."""
    launch, gap = usual
    rows = _LAUNCHED.format(p=p)
    by_stream = f"(prev_end <> {NONE} AND prev_end + {gap} >= call_s + {launch})"
    late = source.arrow(
        f"SELECT id, s, lane, device, call_s, launch, call_s + {launch} AS usual_start FROM ({rows}) "
        f"WHERE NOT {by_stream} AND since > {2 * launch + DEP_GAP_NS} ORDER BY s, id"
    )
    comm = source.arrow(f"SELECT id, e, lane, device, call_s, launch FROM ({rows}) WHERE klass = 2 ORDER BY s, id")
    if not late.num_rows or not comm.num_rows:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    lt = {c: _ints(late[c]) for c in late.column_names}
    cm = {c: _ints(comm[c]) for c in comm.column_names}
    found, on = [], []
    for dev in np.unique(cm["device"]):
        mine = np.flatnonzero(cm["device"] == dev)
        mine = mine[np.argsort(cm["e"][mine], kind="stable")]
        rows_ = np.flatnonzero(lt["device"] == dev)
        at = np.searchsorted(cm["e"][mine], lt["s"][rows_], side="right") - 1
        j = mine[np.maximum(at, 0)]
        ok = (at >= 0) & (cm["lane"][j] != lt["lane"][rows_]) & (lt["s"][rows_] - cm["e"][j] <= DEP_GAP_NS)
        ok &= cm["e"][j] > lt["usual_start"][rows_]
        # launched before it: its call comes first in the calls' order (start, then id)
        ok &= (cm["call_s"][j] < lt["call_s"][rows_]) | (
            (cm["call_s"][j] == lt["call_s"][rows_]) & (cm["launch"][j] < lt["launch"][rows_])
        )
        found.append(rows_[ok])
        on.append(j[ok])
    row, col = np.concatenate(found), np.concatenate(on)
    order = np.argsort(lt["id"][row], kind="stable")
    row, col = row[order], col[order]
    return lt["id"][row], cm["id"][col], lt["s"][row] - cm["e"][col]


def _pairs(t: pa.Table) -> dict[int, int]:
    """A two-column result as a mapping of its first column to its second."""
    return dict(zip(t.column(0).to_pylist(), t.column(1).to_pylist(), strict=True))


def _span(column: str, t0: int | None, t1: int | None) -> str:
    """``column`` in ``[t0, t1)`` (None: without bound; a null is in no span)."""
    return " AND ".join(
        [
            f"{column} IS NOT NULL",
            *([f"{column} >= {t0}"] if t0 is not None else []),
            *([f"{column} < {t1}"] if t1 is not None else []),
        ]
    )


def _launching(ids: I.I64, launch: I.I64) -> I.I64:
    """Each launch's call among the calls of event ids ``ids`` (-1: none)."""
    call = np.full(len(launch), -1, np.int64)
    if len(ids):
        order = np.argsort(ids, kind="stable")
        at = np.minimum(np.searchsorted(ids[order], launch), len(ids) - 1)
        found = ids[order[at]] == launch
        call[found] = order[at[found]]
    return call


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


def _ints(col: object) -> I.I64:
    return np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.int64)  # type: ignore[attr-defined]
