"""The trees' pass where CUDA API calls are leaves: the calls read once, in the order of the file,
instead of sorted with every host range and joined with their GPU work.

Most host ranges of an Nsight Systems export are CUDA API calls (4.2M of 4.3M in the 16x bench
export), and a call is rarely more than a leaf: it is no operator, and nothing starts inside it.
All a leaf gives the walk (:mod:`traceconv.analyses.summary.attribution.tree`) goes to its parent, the innermost range
open when it starts: its duration and itself as a child, the GPU time it launched, and, when its
region is asked for, the parent's region. So :func:`scan` reads the other host ranges (operators,
annotations, NVTX ranges: the structure) sorted, then the calls as the file holds them, each finding
its parent with a binary search and a climb to the first ancestor still open, and its process.
``measure.tree_stream`` then leaves the calls out of its table of ranges, and ``leaf_gpu.gpu_pass`` reads
the GPU rows once (each finds its launching call and that call's process by event id,
:func:`launch_lookup`) into what the calls and the structure's ranges need of them; :func:`walk`
walks the structure as one block with what its calls add to it.

That each call is a leaf is checked as they pass: on each thread, every call starts once the one
before it in the file has ended (no call inside a call; calls stored out of start order fail it
too), and no range of the structure starts inside a call (or with it, unless it encloses it). Where
a check fails, the input is not one trace, the calls are not many more than the structure, the
structure is too large to hold, or the calls' ids are too sparse to index by, :func:`scan` returns
None and every range goes through the sorted stream as before. Both ways give the same summary
(tests/test_leaves.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import duckdb
import numpy as np
import numpy.typing as npt
import pyarrow as pa
from duckdb.func import FunctionNullHandling, PythonUDFType

from traceconv.analyses import intervals as I
from traceconv.analyses.prepare import HOST_RANGES, HOST_THREAD, Facts, host_extents, host_span
from traceconv.analyses.source import Source
from traceconv.analyses.summary.attribution.tree import I64, Leaves, Totals, Trees, block_of, named_samples, work

RATIO = 4  # the calls must be at least this many times the other host ranges
MOST_STRUCTURE = 1 << 18  # the most other host ranges held whole as one block
BATCH = 1 << 18  # calls per batch of the stream
PACKED_LIMIT = 1 << 62  # thread code * time span + time must stay below this in an int64 key
CALL_PID = "leaf_call_pid"  # the SQL function: a call's process id by its event id (null: no call)
NONE = "CAST(NULL AS BIGINT)"  # what stands for it where the calls are not leaves
FEW_RUNS = 16  # the most runs of call ids (one process each) looked up by a macro of comparisons


@dataclass(frozen=True)
class Structure:
    """The host ranges that are not calls, in (thread, start, longest first) order, with what the
    calls' parents are looked up by: one key per range (thread code, doubled start)."""

    event_id: I64
    group: I64  # the thread's code: its place in ``threads``
    end: I64
    threads: I64  # the sorted thread hashes
    keys: I64
    end2: I64  # doubled ends, at least the doubled start + 1 (a zero-length range covers its start)
    parent: I64
    base: int  # times are doubled after this is taken away
    span: int  # doubled times lie in [0, span)


@dataclass
class Calls:
    """The calls, found to be leaves: what they add up to per structure row, and each call's parent
    row and process (by event id - ``first_id``; -2 / -1: no call there)."""

    structure: Structure
    first_id: int
    parent_of: np.ndarray  # int32: the parent row, -1 none
    pid_of: np.ndarray  # int16: the process's place in ``pids`` (more processes: not taken as leaves)
    pids: list[int] = field(default_factory=list)
    dur: I64 = field(init=False)
    count: I64 = field(init=False)
    gpu: I64 = field(init=False)
    wanted_row: list[I64] = field(default_factory=list)  # parents of the calls whose region is asked for
    wanted_key: list[tuple[str, int]] = field(default_factory=list)  # and those calls' keys
    last_end: dict[int, int] = field(default_factory=dict)  # thread hash -> the doubled end of its last call
    # The calls whose previous call on their thread is wanted (by event id - ``first_id``: a lookup
    # per call, not a binary search; None: none is), the last call (event id, duration) of each
    # thread so far, and the (call, previous call, its duration) found.
    blocking: npt.NDArray[np.bool_] | None = None
    last_call: dict[int, tuple[int, int]] = field(default_factory=dict)
    previous: list[tuple[I64, I64, I64]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.dur, self.count, self.gpu = (np.zeros(len(self.structure.event_id), np.int64) for _ in range(3))

    def parents(self, eid: I64) -> I64:
        """The parent row of each call ``eid`` names (-1: none; -2: no call)."""
        return self._by_id(self.parent_of, eid, -2)

    def pid_codes(self, eid: I64) -> I64:
        """The place in ``pids`` of each call's process (-1: no call)."""
        return self._by_id(self.pid_of, eid, -1)

    def _by_id(self, values: np.ndarray, eid: I64, missing: int) -> I64:
        slot = eid - self.first_id
        found = (slot >= 0) & (slot < len(values))
        got = np.full(len(eid), missing, np.int64)
        got[found] = values[slot[found]]
        return got

    def ask(self, trace: str, parent: I64, eid: I64, asked: npt.NDArray[np.bool_]) -> None:
        """The regions of the calls ``asked`` for: their parents'."""
        asked = asked & (parent >= 0)
        self.wanted_row.append(parent[asked])
        self.wanted_key += [(trace, e) for e in eid[asked].tolist()]

    def previous_calls(self) -> pa.Table:
        """For each call of ``blocking`` after the first of its thread: ``event_id``, the call before it
        on its thread (``prev_id``: in the file's order, which on each thread is start order, as the
        calls were checked to follow one another) and that call's duration (``prev_dur``, 0 if none)."""
        found = [np.concatenate(c) if c else np.zeros(0, np.int64) for c in zip(*self.previous, strict=True)]
        cols = found or [np.zeros(0, np.int64)] * 3
        return pa.table(dict(zip(("event_id", "prev_id", "prev_dur"), cols, strict=True)))

    def leaves(self) -> Leaves:
        rows = np.concatenate(self.wanted_row) if self.wanted_row else np.zeros(0, np.int64)
        return Leaves(dur=self.dur, count=self.count, gpu=self.gpu, wanted_row=rows, wanted_key=self.wanted_key)


def scan(source: Source, facts: Facts, traces: list[str], blocking: I64 | None = None) -> Calls | None:
    """The calls read once, in the file's order, to their parents; None where they cannot all be
    taken as leaves (see the module). ``blocking``: sorted event ids of calls whose previous call
    on their thread is wanted (:meth:`Calls.previous_calls`)."""
    plan = _plan(source, traces)
    if plan is None:
        return None
    first_id, last_id, base, top = plan
    structure = _structure(source.arrow(_structure_query(facts.last_end)), base, top)
    if structure is None:
        return None
    size = last_id - first_id + 1
    calls = Calls(structure, first_id, np.full(size, -2, np.int32), np.full(size, -1, np.int16))
    if blocking is not None and len(blocking):
        slots = blocking - first_id
        calls.blocking = np.zeros(size, np.bool_)
        calls.blocking[slots[(slots >= 0) & (slots < size)]] = True
    with source.in_order():
        for batch in source.batches(_calls(facts.last_end), BATCH):
            if not _add_calls(calls, batch):
                return None
    calls.blocking = None  # read by the scan only
    return calls


@contextlib.contextmanager
def launch_lookup(source: Source, calls: Calls) -> Iterator[Callable[[str], str]]:
    """SQL for the process of the call an event id names (null: no call), while the queries that
    need it run; the calls' processes are let go after. Where the calls' ids fall in a few
    runs of one process each (an export's calls are numbered together), a macro of comparisons;
    else a lookup in Python, a batch of ids at a time."""
    pids = np.array(calls.pids, np.int64)
    runs = _runs(calls.pid_of, calls.first_id)
    if runs is not None:
        cases = " ".join(f"WHEN x BETWEEN {a} AND {b} THEN CAST({int(pids[c])} AS BIGINT)" for a, b, c in runs)
        source.run(f"CREATE OR REPLACE MACRO {CALL_PID}(x) AS " + (f"CASE {cases} END" if runs else NONE))
    else:

        def pid(ids: pa.Array) -> pa.Array:
            eid = np.asarray(ids.fill_null(calls.first_id - 1).to_numpy(zero_copy_only=False), np.int64)
            code = calls.pid_codes(eid)
            return pa.array(pids[np.maximum(code, 0)] if len(pids) else np.zeros(len(eid), np.int64), mask=code < 0)

        nulls = FunctionNullHandling.SPECIAL  # it gives null for an id that names no call
        source.con.create_function(
            CALL_PID, pid, ["BIGINT"], "BIGINT", type=PythonUDFType.ARROW, null_handling=nulls, side_effects=False
        )
    try:
        yield lambda column: f"{CALL_PID}({column})"
    finally:
        if runs is None:
            with contextlib.suppress(duckdb.InvalidInputException):
                source.con.remove_function(CALL_PID)
        else:
            source.run(f"DROP MACRO IF EXISTS {CALL_PID}")
        calls.pid_of = np.zeros(0, np.int16)


def _runs(codes: np.ndarray, first_id: int) -> list[tuple[int, int, int]] | None:
    """The (first id, last id, process code) of each run of ids with calls of one process (``codes``:
    by id - ``first_id``, -1 no call); None where there are more than :data:`FEW_RUNS`."""
    change = np.flatnonzero(codes[1:] != codes[:-1]) + 1
    if len(change) > 2 * FEW_RUNS:
        return None
    starts = np.r_[0, change]
    ends = np.r_[change - 1, len(codes) - 1]
    kept = codes[starts] >= 0
    return [
        (first_id + int(a), first_id + int(b), int(c))
        for a, b, c in zip(starts[kept], ends[kept], codes[starts[kept]], strict=True)
    ]


def walk(
    source: Source, calls: Calls, query: str, facts: Facts, traces: list[str], windows: Sequence[tuple[I64, I64]]
) -> Trees:
    """The trees' pass: the structure (``query``: its stream, with its GPU sums) walked as one block,
    with what the calls add to it."""
    trees = Trees(facts.label_names, traces, [Totals(len(facts.label_names)) for _ in windows])
    batches = list(source.batches(query))
    if sum(b.num_rows for b in batches):
        block = block_of(pa.Table.from_batches(batches))
        del batches
        if not np.array_equal(block.event_id, calls.structure.event_id):
            raise RuntimeError("the structure's stream does not follow the order it was scanned in")
        work(block, windows, trees, calls.leaves())
    named_samples(trees)
    return trees


def _plan(source: Source, traces: list[str]) -> tuple[int, int, int, int] | None:
    """(first and last call event id, earliest start, latest time) where the calls may be taken as leaves."""
    if len(traces) != 1:
        return None
    extents = host_extents(source)
    calls, others = extents.get(True), extents.get(False, {"n": 0})["n"]
    if calls is None or calls["n"] < RATIO * others or others > MOST_STRUCTURE:
        return None
    first_id, last_id = calls["first_id"], calls["last_id"]
    if last_id - first_id + 1 > 4 * calls["n"] + (1 << 16):  # the calls' ids must be dense enough to index by
        return None
    span = host_span(source)
    top = max(t for t in (span["last"], span["last_start"]) if t is not None)
    return int(first_id), int(last_id), int(span["first"]), int(top)


def _structure_query(last_end: int) -> str:
    """The structure in the order of the trees' stream (``measure.ranges_query``)."""
    return (
        f"SELECT {HOST_THREAD} AS thread, event_id, start_ns, coalesce(end_ns, {last_end}) AS end_ns "
        f"FROM ({HOST_RANGES}) WHERE kind <> 'cuda_api' ORDER BY thread, start_ns, end_ns DESC, event_id"
    )


def _structure(table: pa.Table, base: int, top: int) -> Structure | None:
    """The structure's lookup keys; None where they would not fit an int64."""
    thread, eid, start, end = (np.asarray(table[c].to_numpy(), np.int64) for c in table.column_names)
    head = np.r_[True, thread[1:] != thread[:-1]] if len(thread) else np.zeros(0, bool)
    threads = thread[head]  # sorted: the rows are ordered by thread
    group = np.cumsum(head).astype(np.int64) - 1
    span = 2 * (top - base) + 2
    if len(threads) * span >= PACKED_LIMIT:
        return None
    s2, e2 = I.doubled(base, start, end)
    return Structure(eid, group, end, threads, group * span + s2, e2, I.parents(group, start, end), base, span)


def _calls(last_end: int) -> str:
    """The calls in the file's order."""
    return (
        f"SELECT {HOST_THREAD} AS thread, event_id, start_ns, coalesce(end_ns, {last_end}) AS end_ns, "
        f"coalesce(dur_ns, 0) AS dur_ns, pid FROM ({HOST_RANGES}) WHERE kind = 'cuda_api'"
    )


def _add_calls(calls: Calls, batch: pa.RecordBatch) -> bool:
    """A batch of calls to their parents; False where a call is not a leaf."""
    thread, eid, start, end, dur, pid = (np.asarray(batch.column(i).to_numpy(), np.int64) for i in range(6))
    st = calls.structure
    s2, e2 = I.doubled(st.base, start, end)
    if not _one_after_another(calls, thread, s2, e2, eid, dur):
        return False
    if len(st.keys):
        parent = _parents(st, thread, s2, e2, end)
        if parent is None:
            return False
    else:  # no structure: no call has a parent
        parent = np.full(len(eid), -1, np.int64)
    slot = eid - calls.first_id
    calls.parent_of[slot] = parent
    calls.pid_of[slot] = _codes(calls.pids, pid)
    if len(calls.pids) > np.iinfo(calls.pid_of.dtype).max:
        return False
    # parent + 1: no parent (-1) counts in a slot of its own, dropped
    calls.dur += np.bincount(parent + 1, weights=dur, minlength=len(calls.dur) + 1)[1:].astype(np.int64)
    calls.count += np.bincount(parent + 1, minlength=len(calls.count) + 1)[1:]
    return True


def _parents(st: Structure, thread: I64, s2: I64, e2: I64, end: I64) -> I64 | None:
    """Each call's parent row in the structure (-1: none); None where a range of the structure starts
    inside a call. Whole-array tests with clamped indices, not boolean masks (slower to subscript)."""
    code = np.searchsorted(st.threads, thread)
    known = (code < len(st.threads)) & (st.threads[np.minimum(code, len(st.threads) - 1)] == thread)
    code = np.where(known, code, 0)
    key = code * st.span + s2
    at = np.searchsorted(st.keys, key, "right")  # first structure range starting after it
    inside = st.keys[np.minimum(at, len(st.keys) - 1)] < code * st.span + e2  # and that one starts inside it
    inside &= at < len(st.keys)
    k = np.maximum(at - 1, 0)
    mine = known & (at > 0) & (st.group[k] == code)
    # a range starting with the call must enclose it (come before it in the stream's order)
    same = mine & (st.keys[k] == key)
    if bool((known & inside).any()) or bool((same & (st.end[k] <= end)).any()):
        return None
    return _open_ancestor(st, np.where(mine, k, -1), s2)


def _codes(known: list[int], values: I64) -> I64:
    """``values``' places in ``known``, the new ones added to it."""
    if len(values) and values[0] in known and bool((values == values[0]).all()):  # one process: most batches
        return np.full(len(values), known.index(int(values[0])), np.int64)
    distinct, inverse = np.unique(values, return_inverse=True)
    places = {v: i for i, v in enumerate(known)}
    for v in distinct.tolist():
        if v not in places:
            places[v] = len(known)
            known.append(v)
    return np.array([places[v] for v in distinct.tolist()], np.int64)[inverse]


def _one_after_another(calls: Calls, thread: I64, s2: I64, e2: I64, eid: I64, dur: I64) -> bool:
    """Whether, thread by thread, each call starts once the one before it (in the file) ended; and
    the call before each blocking call of the batch (:meth:`Calls.previous_calls`)."""
    order = np.argsort(thread, kind="stable")
    t, s, e = thread[order], s2[order], e2[order]
    head = np.concatenate(([True], t[1:] != t[:-1]))
    if bool((s[1:][~head[1:]] < e[:-1][~head[1:]]).any()):
        return False
    heads = np.flatnonzero(head)
    tails = np.concatenate((heads[1:] - 1, [len(t) - 1]))
    if calls.blocking is not None:
        ids = eid[order]
        _previous(calls, calls.blocking[ids - calls.first_id], t, ids, dur[order], head)
    ends = zip(t[heads].tolist(), s[heads].tolist(), e[tails].tolist(), order[tails].tolist(), strict=True)
    for th, first, last, tail in ends:
        if first < calls.last_end.get(th, first):
            return False
        calls.last_end[th] = last
        calls.last_call[th] = (int(eid[tail]), int(dur[tail]))
    return True


def _previous(
    calls: Calls, blocking: npt.NDArray[np.bool_], t: I64, eid: I64, dur: I64, head: npt.NDArray[np.bool_]
) -> None:
    """The call before each blocking call (``blocking``) among ``eid`` (a batch in thread order,
    ``head``: a thread's first): the row before it, or for a thread's first the thread's last call
    of the batches before."""
    hit = np.flatnonzero(blocking)
    inner = hit[~head[hit]]
    calls.previous.append((eid[inner], eid[inner - 1], dur[inner - 1]))
    first = [(int(eid[i]), *calls.last_call[int(t[i])]) for i in hit[head[hit]] if int(t[i]) in calls.last_call]
    if first:
        ids, before, durs = (np.array(c, np.int64) for c in zip(*first, strict=True))
        calls.previous.append((ids, before, durs))


def _open_ancestor(st: Structure, k: I64, s2: I64) -> I64:
    """From each row ``k`` (-1: none), the first of it and its ancestors still open at ``s2``."""
    k = k.copy()
    todo = np.flatnonzero(k >= 0)
    while len(todo):
        todo = todo[st.end2[k[todo]] <= s2[todo]]
        k[todo] = st.parent[k[todo]]
        todo = todo[k[todo] >= 0]
    return k
