"""The host ranges' trees, streamed: per operator name its calls and times, in bounded memory.

Host ranges (CPU operators, host annotations and NVTX ranges, CUDA API calls) come from DuckDB
sorted by thread and start (longest first), with the GPU time attributed to each: ``self_gpu``
(GPU rows whose operator it is) and ``first_gpu`` (GPU rows whose launching call it is, else
whose operator; a CUDA graph replay's rows, whose operator: the one that captured them where the
capture is in the profile). They are cut into blocks of whole trees (a cut where no range of the
thread is still open) and each block is worked out in numpy: parents (:func:`intervals.parents`),
CPU time minus the direct children, GPU time of the subtree, repeats folded into their parent as
``torch.profiler`` folds them, and the innermost annotation around each range (its region).
Then only sums per name and scope stay: memory grows with the names, not the ranges.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa

from traceconv.analyses import intervals as I

I64 = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]
KIND_CODES = ("cpu_op", "nvtx", "cuda_api")  # the stream's ``kind`` codes
NVTX = KIND_CODES.index("nvtx")
BATCH_ROWS = 1 << 16  # host ranges per batch of the stream: bounds the memory of a block worked out in numpy
SAMPLE = 200  # calls per operator name whose arguments are read for its input shapes
OP_MEASURES = ("calls", "gpu_self_ns", "gpu_total_ns", "cpu_total_ns", "cpu_self_ns")
NVTX_MEASURES = ("count", "dur_ns", "gpu_ns", "gpu_process_ns")


@dataclass
class Totals:
    """Sums per name code over the ranges of one scope."""

    size: int
    ops: dict[str, I64] = field(default_factory=dict)
    nvtx: dict[str, I64] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.ops = {m: np.zeros(self.size, np.int64) for m in OP_MEASURES}
        self.nvtx = {m: np.zeros(self.size, np.int64) for m in NVTX_MEASURES}


@dataclass
class Trees:
    """What the pass keeps: per scope the sums per name, the operators' first kind, a sample of
    each operator's event ids, and the region of the ranges asked for."""

    labels: list[str]
    traces: list[str]
    scopes: list[Totals]
    first_kind: dict[int, tuple[str, int, str]] = field(default_factory=dict)  # label -> (trace, eid, kind)
    samples: dict[int, list[tuple[str, int]]] = field(default_factory=dict)
    coded: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # samples while walking: trace codes
    regions: dict[tuple[str, int], str] = field(default_factory=dict)

    def op_table(self, scope: int) -> pd.DataFrame:
        t = self.scopes[scope].ops
        used = np.flatnonzero(t["calls"] > 0)
        frame = pd.DataFrame({m: t[m][used] for m in OP_MEASURES})
        frame.insert(0, "name", [self.labels[i] for i in used])
        frame["kind"] = [self.first_kind[int(i)][2] for i in used]
        return _sorted(frame, ["gpu_self_ns", "gpu_total_ns", "cpu_total_ns"])

    def nvtx_table(self, scope: int) -> pd.DataFrame:
        t = self.scopes[scope].nvtx
        used = np.flatnonzero(t["count"] > 0)
        frame = pd.DataFrame({m: t[m][used] for m in NVTX_MEASURES})
        frame.insert(0, "name", [self.labels[i] for i in used])
        return _sorted(frame, ["gpu_ns", "dur_ns"])


@dataclass(frozen=True)
class Block:
    """Whole trees of ranges, in (thread, start, longest first) order, as numpy columns."""

    trace: I64  # the trace's code: its place in the sorted trace ids
    event_id: I64
    kind: I64  # the place of the kind in ``KIND_CODES``
    label: I64  # -1: no name
    is_op: Bools
    is_step: Bools
    is_region: Bools  # an annotation or NVTX range that is not a step
    start: I64
    end: I64
    dur: I64  # 0 where unknown
    has_dur: Bools
    group: I64
    self_gpu: I64
    first_gpu: I64
    process_gpu: I64
    wanted: Bools  # its region is asked for

    def __len__(self) -> int:
        return len(self.start)


@dataclass(frozen=True)
class Leaves:
    """What CUDA API calls kept out of a block add to the block's rows, their parents
    (:mod:`traceconv.analyses.summary.attribution.leaves`): per row the calls' summed durations, their count and the GPU
    time they launched; and the calls whose region is asked for, as their parent's row and their key."""

    dur: I64
    count: I64
    gpu: I64
    wanted_row: I64
    wanted_key: list[tuple[str, int]]


def walk(
    batches: Iterator[pa.RecordBatch], windows: Sequence[tuple[I64, I64]], labels: list[str], traces: list[str]
) -> Trees:
    """Work out every block of ``batches`` (the stream :mod:`traceconv.analyses.summary.measure` queries);
    ``windows``: the scopes' time windows, each as sorted disjoint segments; ``traces``: the trace
    ids the stream's codes stand for."""
    trees = Trees(labels, traces, [Totals(len(labels)) for _ in windows])
    for block in blocks(batches):
        work(block, windows, trees)
    named_samples(trees)
    return trees


def blocks(batches: Iterator[pa.RecordBatch]) -> Iterator[Block]:
    """Blocks of whole trees: each batch up to its last cut, the rest carried into the next."""
    carry: pa.Table | None = None
    for batch in batches:
        table = pa.Table.from_batches([batch]) if carry is None else pa.concat_tables([carry, pa.table(batch)])
        cut = _last_cut(table)
        if cut:
            yield block_of(table.slice(0, cut))
        carry = table.slice(cut)
    if carry is not None and carry.num_rows:
        yield block_of(carry)


def _runs(table: pa.Table) -> I64:
    """Dense codes of the threads (``thread``: a hash of trace, pid and tid), which come one
    after another in the stream."""
    thread = _ints(table["thread"])
    change = np.r_[True, thread[1:] != thread[:-1]] if len(thread) else np.zeros(0, dtype=bool)
    return np.cumsum(change).astype(np.int64) - 1


def _last_cut(table: pa.Table) -> int:
    """The last row at which no range of its thread is still open (0: none in this table)."""
    g = _runs(table)
    s2 = _ints(table["start_ns"]) * 2
    e2 = np.maximum(_ints(table["end_ns"]) * 2, s2 + 1)
    new = np.r_[True, g[1:] != g[:-1]]
    # the largest end seen before each row on its thread: a running max that restarts per thread
    reach = _running_max(e2, new)
    free = new.copy()
    free[1:] |= reach[:-1] <= s2[1:]
    cuts = np.flatnonzero(free)
    return int(cuts[-1]) if len(cuts) else 0


def _running_max(values: I64, restart: Bools) -> I64:
    run = np.cumsum(restart) - 1
    offset = np.zeros(len(values), np.int64)
    if len(values):
        big = int(values.max()) - int(values.min()) + 1
        offset = run.astype(np.int64) * big  # each thread's values lifted above the previous one's
    return np.maximum.accumulate(values - values.min() + offset) - offset + values.min() if len(values) else values


def block_of(table: pa.Table) -> Block:
    def col(name: str) -> I64:
        return _ints(table[name])

    dur = table["dur_ns"]
    return Block(
        trace=col("trace"),
        event_id=col("event_id"),
        kind=col("kind"),
        label=col("label"),
        is_op=_bools(table["is_op"]),
        is_step=_bools(table["is_step"]),
        is_region=_bools(table["is_region"]),
        start=col("start_ns"),
        end=col("end_ns"),
        dur=col("dur_ns"),
        has_dur=np.asarray(dur.is_valid().to_numpy(zero_copy_only=False), dtype=bool),
        group=_runs(table),
        self_gpu=col("self_gpu"),
        first_gpu=col("first_gpu"),
        process_gpu=col("process_gpu"),
        wanted=_bools(table["wanted"]),
    )


def work(b: Block, windows: Sequence[tuple[I64, I64]], trees: Trees, leaves: Leaves | None = None) -> None:
    """One block's sums into ``trees``; ``leaves``: what calls kept out of the block add to its rows
    (their children: durations, count, GPU time)."""
    n = len(b)
    parent = I.parents(b.group, b.start, b.end)
    child = parent >= 0
    children = np.bincount(parent[child], weights=b.dur[child], minlength=n).astype(np.int64)
    first_gpu = np.where(b.first_gpu > 0, b.first_gpu, 0)  # what each range passes up to its ancestors
    if leaves is not None:
        children += leaves.dur
        first_gpu += leaves.gpu
    cpu_self = np.maximum(b.dur - children, 0)
    gpu_total = np.zeros(n, np.int64)
    launching = np.flatnonzero(first_gpu > 0)
    for rows, node in I.ancestors(parent, launching):  # each range's GPU time, to it and every ancestor
        gpu_total += np.rint(np.bincount(node, weights=first_gpu[launching[rows]], minlength=n)).astype(np.int64)
    more = leaves.count if leaves is not None else None
    merged, cpu_self, gpu_self = _merge_repeats(b, parent, cpu_self, b.self_gpu.copy(), more)
    _regions(b, parent, trees, leaves)
    op = b.is_op & ~merged
    _samples(b, op, trees)
    _first_kinds(b, op, trees)
    nvtx = (b.kind == NVTX) & ~merged
    for totals, (w_start, w_end) in zip(trees.scopes, windows, strict=True):
        inside = I.inside(b.start, w_start, w_end)
        _add(totals.ops, b.label, op & inside, calls=1, gpu_self_ns=gpu_self, gpu_total_ns=gpu_total,
             cpu_total_ns=b.dur, cpu_self_ns=cpu_self)  # fmt: skip
        _add(totals.nvtx, b.label, nvtx & inside, count=1, dur_ns=b.dur, gpu_ns=gpu_total, gpu_process_ns=b.process_gpu)


def _add(store: dict[str, I64], label: I64, rows: Bools, **values: I64 | int) -> None:
    keep = rows & (label >= 0)
    codes = label[keep]
    size = len(next(iter(store.values())))
    for name, v in values.items():
        weights = np.ones(len(codes)) if isinstance(v, int) else v[keep].astype(np.float64)
        store[name] += np.rint(np.bincount(codes, weights=weights, minlength=size)).astype(np.int64)


def _merge_repeats(
    b: Block, parent: I64, cpu_self: I64, gpu_self: I64, more_children: I64 | None = None
) -> tuple[Bools, I64, I64]:
    """Fold an operator into its parent when the parent has its name and no other child
    (``torch.profiler``'s ``_remove_dup_nodes``); its self times move to the row it folds into.
    ``more_children``: per row, its children that are not rows of the block."""
    n = len(parent)
    has_parent = parent >= 0
    p = np.maximum(parent, 0)
    children = np.bincount(parent[has_parent], minlength=n)
    if more_children is not None:
        children = children + more_children
    only_child = children[p] == 1
    merged = has_parent & only_child & (b.label == b.label[p]) & (b.label >= 0) & b.is_op
    if not merged.any():
        return merged, cpu_self, gpu_self
    target = np.where(merged, parent, -1)
    while True:  # a chain of repeats folds into its first non-repeat
        deeper = (target >= 0) & merged[np.maximum(target, 0)]
        if not deeper.any():
            break
        target[deeper] = parent[target[deeper]]
    rows = np.flatnonzero(merged)
    for values in (cpu_self, gpu_self):
        np.add.at(values, target[rows], values[rows])
        values[rows] = 0
    return merged, cpu_self, gpu_self


def _regions(b: Block, parent: I64, trees: Trees, leaves: Leaves | None = None) -> None:
    """The innermost annotation or NVTX range (not a step) around each wanted range, itself included;
    a wanted call of ``leaves`` (never a region itself) gets its parent row's."""
    own = np.flatnonzero(b.wanted)
    wanted = own if leaves is None else np.concatenate([own, leaves.wanted_row])
    if not len(wanted):
        return
    found = np.full(len(wanted), -1, dtype=np.int64)
    for rows, node in I.ancestors(parent, wanted):
        hit = (found[rows] < 0) & b.is_region[node]
        found[rows[hit]] = node[hit]
    calls = leaves.wanted_key if leaves is not None else []
    for i in np.flatnonzero(found >= 0).tolist():
        label = int(b.label[found[i]])
        if label < 0:
            continue
        row = int(own[i]) if i < len(own) else -1
        key = (trees.traces[int(b.trace[row])], int(b.event_id[row])) if row >= 0 else calls[i - len(own)]
        trees.regions[key] = trees.labels[label]


def _first_kinds(b: Block, op: Bools, trees: Trees) -> None:
    """Each operator name's kind, from its first row by (trace, event id)."""
    rows = np.flatnonzero(op & (b.label >= 0))
    if not len(rows):
        return
    frame = pd.DataFrame(
        {"label": b.label[rows], "trace": b.trace[rows], "eid": b.event_id[rows], "kind": b.kind[rows]}
    )
    first = frame.sort_values(["trace", "eid"], kind="stable").drop_duplicates("label")
    for label, trace, eid, kind in first.itertuples(index=False):
        held = trees.first_kind.get(int(label))
        key = (trees.traces[int(trace)], int(eid))
        if held is None or key < held[:2]:
            trees.first_kind[int(label)] = (*key, KIND_CODES[int(kind)])


def _samples(b: Block, op: Bools, trees: Trees) -> None:
    rows = np.flatnonzero(op & (b.label >= 0))
    if not len(rows):
        return
    frame = pd.DataFrame({"label": b.label[rows], "trace": b.trace[rows], "eid": b.event_id[rows]})
    for label, part in frame.groupby("label", sort=False):
        held = trees.coded.setdefault(int(label), [])
        held.extend(zip(part["trace"].tolist(), part["eid"].tolist(), strict=True))
        if len(held) > SAMPLE:
            held.sort()
            del held[SAMPLE:]


def named_samples(trees: Trees) -> None:
    """Each operator's sample, its first calls by (trace, event id), with the traces' ids."""
    for label, held in trees.coded.items():
        trees.samples[label] = [(trees.traces[t], e) for t, e in sorted(held)]
    trees.coded.clear()


def _sorted(df: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    out: pd.DataFrame = df.sort_values([*by, "name"], ascending=[*[False] * len(by), True], kind="stable")
    result: pd.DataFrame = out.reset_index(drop=True)
    return result


def _ints(col: pa.ChunkedArray | pa.Array) -> I64:
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    full = arr.fill_null(0) if arr.null_count else arr
    return np.asarray(full.to_numpy(zero_copy_only=False), dtype=np.int64)


def _bools(col: pa.ChunkedArray | pa.Array) -> Bools:
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    full = arr.fill_null(False) if arr.null_count else arr
    return np.asarray(full.to_numpy(zero_copy_only=False), dtype=bool)
