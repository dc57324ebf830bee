"""The trees' pass where CUDA API calls are leaves: the calls stream past the other host ranges in
the order of the file, unsorted.

Most host ranges of an Nsight Systems export are CUDA API calls (4.2M of 4.3M in the 16x bench
export), and a call is rarely more than a leaf: it is no operator, and nothing starts inside it.
All a leaf gives the walk (:mod:`traceconv.analyses.tree`) goes to its parent, the innermost range
open when it starts: its duration and itself as a child, the GPU time it launched, and, when its
region is asked for, the parent's region. So the rest of the host ranges (operators, annotations,
NVTX ranges: the structure) are walked as one block, and each call finds its parent among them with
a binary search and a climb to the first ancestor still open, instead of every call being sorted by
thread and start and joined with its GPU sums.

That each call is a leaf is checked as they pass: on each thread, every call starts once the one
before it in the file has ended (no call inside a call; calls stored out of start order fail it
too), and no range of the structure starts inside a call (or with it, unless it encloses it). Where
a check fails, the input is not one trace, the calls are not many more than the structure, or the
structure is too large to hold, :func:`walk` returns None and every range goes through the sorted
stream as before. Both ways give the same sums (tests/test_leaves.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from traceconv.analyses import intervals as I
from traceconv.analyses.prepare import Facts
from traceconv.analyses.source import Source
from traceconv.analyses.tree import I64, Block, Leaves, Totals, Trees, block_of, named_samples, work

RATIO = 4  # the calls must be at least this many times the other host ranges
MOST_STRUCTURE = 1 << 18  # the most other host ranges held whole as one block
BATCH = 1 << 18  # calls per batch of the stream
CALL = 2  # tree.KIND_CODES' cuda_api
PACKED_LIMIT = 1 << 62  # thread code * time span + time must stay below this in an int64 key


@dataclass(frozen=True)
class Structure:
    """The host ranges that are not calls, in (thread, start, longest first) order, with what the
    calls' parents are looked up by: one key per range (thread code, doubled start)."""

    block: Block
    threads: I64  # the sorted thread hashes; a range's code is its thread's place here
    keys: I64
    end2: I64  # doubled ends, at least the doubled start + 1 (a zero-length range covers its start)
    parent: I64
    base: int  # times are doubled after this is taken away
    span: int  # doubled times lie in [0, span)

    def doubled(self, start: I64, end: I64) -> tuple[I64, I64]:
        s2 = (start - self.base) * 2
        return s2, np.maximum((end - self.base) * 2, s2 + 1)


@dataclass
class Found:
    """What the calls add up to per structure row, and each call's parent (by event id)."""

    size: int
    first_id: int
    parent_of: np.ndarray  # per call event id - first_id: its parent row, -1 none, -2 not a call
    dur: I64 = field(init=False)
    count: I64 = field(init=False)
    last_end: dict[int, int] = field(default_factory=dict)  # thread hash -> the doubled end of its last call

    def __post_init__(self) -> None:
        self.dur = np.zeros(self.size, np.int64)
        self.count = np.zeros(self.size, np.int64)


def walk(
    source: Source,
    ranges_query: Callable[[str], str],
    facts: Facts,
    traces: list[str],
    windows: Sequence[tuple[I64, I64]],
) -> Trees | None:
    """The trees' pass with the calls as leaves, or None where that does not hold (see the module)."""
    plan = _plan(source, traces)
    if plan is None:
        return None
    first_id, last_id, base, top = plan
    trees = Trees(facts.label_names, traces, [Totals(len(facts.label_names)) for _ in windows])
    batches = list(source.batches(ranges_query(f"r.kind <> {CALL}")))
    if not sum(b.num_rows for b in batches):  # calls alone: no operator, no region, nothing to add to
        return trees
    structure = _structure(pa.Table.from_batches(batches), base, top)
    del batches
    if structure is None:
        return None
    found = Found(len(structure.block), first_id, np.full(last_id - first_id + 1, -2, np.int32))
    with source.in_order():
        for batch in source.batches(_calls(facts.last_end), BATCH):
            if not _add_calls(structure, found, batch):
                return None
    work(structure.block, windows, trees, _gpu_and_wanted(source, found, traces[0]))
    named_samples(trees)
    return trees


def _plan(source: Source, traces: list[str]) -> tuple[int, int, int, int] | None:
    """(first and last call event id, earliest start, latest time) where the calls may be taken as leaves."""
    if len(traces) != 1:
        return None
    got = source.arrow(
        f"SELECT count(*) FILTER (WHERE kind = {CALL}) AS calls, count(*) FILTER (WHERE kind <> {CALL}) AS others, "
        f"min(event_id) FILTER (WHERE kind = {CALL}) AS first_id, "
        f"max(event_id) FILTER (WHERE kind = {CALL}) AS last_id, "
        "min(start_ns) AS base, greatest(max(end_ns), max(start_ns)) AS top FROM tree_ranges"
    ).to_pylist()[0]
    calls, others, first_id, last_id, base, top = got.values()
    if not calls or calls < RATIO * others or others > MOST_STRUCTURE:
        return None
    if last_id - first_id + 1 > 4 * calls + (1 << 16):  # the calls' ids must be dense enough to index by
        return None
    return int(first_id), int(last_id), int(base), int(top)


def _structure(table: pa.Table, base: int, top: int) -> Structure | None:
    """The structure (rows of the stream, ordered by thread) with its lookup keys; None where they
    would not fit an int64."""
    block = block_of(table)
    thread = np.asarray(table["thread"].to_numpy(), np.int64)
    threads = thread[np.r_[True, thread[1:] != thread[:-1]]]  # sorted: the stream is ordered by thread
    span = 2 * (top - base) + 2
    if len(threads) * span >= PACKED_LIMIT:
        return None
    parent = I.parents(block.group, block.start, block.end)
    st = Structure(block, threads, block.start, block.end, parent, base, span)
    s2, e2 = st.doubled(block.start, block.end)
    return Structure(block, threads, block.group * span + s2, e2, parent, base, span)


def _calls(last_end: int) -> str:
    """The calls in the file's order, with the thread hash ``tree_ranges`` gives them."""
    return (
        "SELECT CAST(hash(coalesce(trace_id, ''), coalesce(pid, -1), coalesce(tid, -1)) >> 1 AS BIGINT) AS thread, "
        f"event_id, start_ns, coalesce(end_ns, {last_end}) AS end_ns, coalesce(dur_ns, 0) AS dur_ns "
        "FROM events WHERE kind = 'cuda_api' AND start_ns IS NOT NULL"
    )


def _add_calls(st: Structure, found: Found, batch: pa.RecordBatch) -> bool:
    """A batch of calls to their parents; False where a call is not a leaf."""
    thread, eid, start, end, dur = (np.asarray(batch.column(i).to_numpy(), np.int64) for i in range(5))
    s2, e2 = st.doubled(start, end)
    if not _one_after_another(found, thread, s2, e2):
        return False
    code = np.searchsorted(st.threads, thread)
    known = code < len(st.threads)
    known[known] = st.threads[code[known]] == thread[known]
    code = np.where(known, code, 0)
    at = np.searchsorted(st.keys, code * st.span + s2, "right")  # first structure range starting after it
    inside = np.searchsorted(st.keys, code * st.span + e2, "left") > at
    k = at - 1
    mine = known & (k >= 0)
    mine[mine] = st.block.group[k[mine]] == code[mine]
    # a range starting with the call must enclose it (come before it in the stream's order)
    same = mine.copy()
    same[same] = st.keys[k[same]] == code[same] * st.span + s2[same]
    if bool((known & inside).any()) or bool((st.block.end[k[same]] <= end[same]).any()):
        return False
    parent = _open_ancestor(st, np.where(mine, k, -1), s2)
    found.parent_of[eid - found.first_id] = parent
    has = parent >= 0
    found.dur += np.bincount(parent[has], weights=dur[has], minlength=found.size).astype(np.int64)
    found.count += np.bincount(parent[has], minlength=found.size)
    return True


def _one_after_another(found: Found, thread: I64, s2: I64, e2: I64) -> bool:
    """Whether, thread by thread, each call starts once the one before it (in the file) ended."""
    order = np.argsort(thread, kind="stable")
    t, s, e = thread[order], s2[order], e2[order]
    head = np.r_[True, t[1:] != t[:-1]]
    if bool((s[1:][~head[1:]] < e[:-1][~head[1:]]).any()):
        return False
    heads = np.flatnonzero(head)
    tails = np.r_[heads[1:] - 1, len(t) - 1]
    for th, first, last in zip(t[heads].tolist(), s[heads].tolist(), e[tails].tolist(), strict=True):
        if first < found.last_end.get(th, first):
            return False
        found.last_end[th] = last
    return True


def _open_ancestor(st: Structure, k: I64, s2: I64) -> I64:
    """From each row ``k`` (-1: none), the first of it and its ancestors still open at ``s2``."""
    k = k.copy()
    todo = np.flatnonzero(k >= 0)
    while len(todo):
        todo = todo[st.end2[k[todo]] <= s2[todo]]
        k[todo] = st.parent[k[todo]]
        todo = todo[k[todo] >= 0]
    return k


def _gpu_and_wanted(source: Source, found: Found, trace: str) -> Leaves:
    """The GPU time each call launched (the trees' sums per range), to its parent; and the calls whose
    region is asked for."""
    gpu = np.zeros(found.size, np.int64)
    rows: list[I64] = []
    keys: list[tuple[str, int]] = []
    span = len(found.parent_of)
    for batch in source.batches("SELECT event_id, first_gpu, wanted FROM tree_gpu_sums WHERE first_gpu <> 0 OR wanted"):
        eid = np.asarray(batch.column(0).to_numpy(), np.int64)
        first_gpu = np.asarray(batch.column(1).to_numpy(), np.int64)
        wanted = np.asarray(batch.column(2).to_numpy(zero_copy_only=False), bool)
        slot = eid - found.first_id
        call = (slot >= 0) & (slot < span)
        parent = np.full(len(eid), -2, np.int64)
        parent[call] = found.parent_of[slot[call]]
        up = (parent >= 0) & (first_gpu > 0)
        gpu += np.bincount(parent[up], weights=first_gpu[up], minlength=found.size).astype(np.int64)
        asked = (parent >= 0) & wanted
        rows.append(parent[asked])
        keys += [(trace, e) for e in eid[asked].tolist()]
    wanted_row = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    return Leaves(dur=found.dur, count=found.count, gpu=gpu, wanted_row=wanted_row, wanted_key=keys)
