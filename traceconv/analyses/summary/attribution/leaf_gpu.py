"""The GPU rows where the CUDA API calls are leaves (:mod:`traceconv.analyses.summary.attribution.leaves`): read once,
a batch at a time, into what the calls and the structure's ranges need of them, instead of a table
of every GPU row written out and read back by one statement per figure (``measure.tree_stream``'s
path for the sorted stream). Both ways give the same summary (tests/test_leaves.py,
tests/test_process_gpu.py)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa

from traceconv.analyses.source import Source, literal
from traceconv.analyses.summary.attribution.leaves import Calls
from traceconv.analyses.summary.attribution.tree import I64

# GPU rows per batch of :func:`gpu_pass` (DuckDB holds several batches of a join's output ahead,
# so that larger batches raise the summary's peak memory: bench/README.md)
GPU_BATCH = 1 << 16


def gpu_pass(source: Source, calls: Calls, trace: str, rows: str, call_pid: Callable[[str], str]) -> None:
    """The GPU rows read once, a batch at a time, into all that the trees need of them where the
    calls are leaves (no table of millions of rows written and read back). ``rows``: each GPU row
    with its launch node and process and its operator node (``measure``'s query of them, with
    columns gpu_id, copy, d, launch_start_ns, launch_node, launch_pid, op_node, first_node).

    - Each call's GPU time (of the rows it launched, or is the first node of) to its parent, and
      the calls whose region is asked for (those that copies start from, and synchronising calls).
    - The table ``tree_gpu_sums``: per range of the structure, the GPU time whose operator it is,
      whose first node it is, and whether its region is asked for (a copy starts from it).
    - The table ``tree_process``: per NVTX range, the GPU time its process launched while it was
      open (launch start within its start and end): per batch, the batch's launches sorted by
      start and summed up to each end of a range that the batch's time span reaches.
    - The table ``copy_nodes``: each copy's first node.

    Sums are exact int64 (a batch's in float64 by ``bincount``: exact below 2^53 ns a batch).
    """
    st = calls.structure
    ids = np.sort(st.event_id)
    self_gpu, first_gpu = np.zeros(len(ids), np.int64), np.zeros(len(ids), np.int64)
    wanted = np.zeros(len(ids), np.bool_)
    ranges = Ranges(source.arrow("SELECT event_id, pid, start_ns, end_ns FROM tree_ranges WHERE kind = 1"))
    copies: list[tuple[I64, I64]] = []
    negative = False
    for batch in source.batches(rows, GPU_BATCH):
        gpu_id, d, launch_start, launch_node, launch_pid, op_node, node = (
            _filled(batch.column(name))
            for name in ("gpu_id", "d", "launch_start_ns", "launch_node", "launch_pid", "op_node", "first_node")
        )
        copy = np.asarray(batch.column("copy").to_numpy(zero_copy_only=False), np.bool_)
        has_launch, has_op = launch_node != _NULL, op_node != _NULL
        parent = calls.parents(node)
        call = parent != -2
        # the calls: their GPU time to their parents
        negative = negative or bool((d[call] < 0).any())
        up = call & (parent >= 0)
        calls.gpu += np.bincount(parent[up], weights=d[up], minlength=len(calls.gpu)).astype(np.int64)
        calls.ask(trace, parent[call], node[call], copy[call])
        # the structure's ranges: what is theirs as first node, and as operator
        own = ~call
        row = _rows(ids, node[own])
        first_gpu += np.bincount(row, weights=d[own], minlength=len(ids)).astype(np.int64)
        wanted[row[copy[own]]] = True
        op = np.flatnonzero(has_op)
        op = op[calls.parents(op_node[op]) == -2]  # operators among the structure's ranges
        self_gpu += np.bincount(_rows(ids, op_node[op]), weights=d[op], minlength=len(ids)).astype(np.int64)
        launched = has_launch & (launch_start != _NULL)
        ranges.add(launch_pid[launched], launch_start[launched], d[launched])
        copies.append((gpu_id[copy], node[copy]))
    if negative:  # a call passes its GPU time up only where its sum is positive: summed call by call
        _positive_sums(source, calls, rows, call_pid)
    source.register(
        "tree_gpu_sums",
        pa.table(
            {
                "tc": np.zeros(len(ids), np.int64),
                "event_id": ids,
                "self_gpu": self_gpu,
                "first_gpu": first_gpu,
                "wanted": wanted,
            }
        ),
    )
    source.register("tree_process", ranges.table())
    # the copies' nodes (16 bytes a copy), with the one trace's id added by a view, not held per row
    nodes = [np.concatenate([c[i] for c in copies]) if copies else np.zeros(0, np.int64) for i in range(2)]
    source.register("copy_node_ids", pa.table({"event_id": nodes[0], "node": nodes[1]}))
    source.run(f"CREATE OR REPLACE VIEW copy_nodes AS SELECT {literal(trace)} AS trace_id, * FROM copy_node_ids")
    syncs = source.arrow(f"SELECT event_id FROM sync_calls WHERE NOT activity AND {call_pid('event_id')} IS NOT NULL")
    eid = np.asarray(syncs["event_id"].to_numpy(), np.int64)
    calls.ask(trace, calls.parents(eid), eid, np.ones(len(eid), bool))


_NULL = np.iinfo(np.int64).min  # a null id or time, as :func:`_filled` gives it


def _filled(column: pa.Array) -> I64:
    return np.asarray(column.fill_null(_NULL).to_numpy(), np.int64)


def _rows(ids: I64, eid: I64) -> I64:
    """The places of the event ids ``eid`` (each one of ``ids``, sorted) in ``ids``."""
    return np.searchsorted(ids, eid)


def _positive_sums(source: Source, calls: Calls, rows: str, call_pid: Callable[[str], str]) -> None:
    calls.gpu[:] = 0
    node = "first_node"
    sums = source.arrow(
        f"SELECT {node} AS node, isum(d) AS d FROM ({rows}) WHERE {call_pid(node)} IS NOT NULL "
        "GROUP BY ALL HAVING isum(d) > 0"
    )
    parent = calls.parents(np.asarray(sums["node"].to_numpy(), np.int64))
    up = parent >= 0
    d = np.asarray(sums["d"].to_numpy(), np.int64)
    calls.gpu += np.bincount(parent[up], weights=d[up], minlength=len(calls.gpu)).astype(np.int64)


class Ranges:
    """The NVTX ranges (event_id, pid, start_ns, end_ns) and the GPU time their process launched
    inside each, summed batch after batch of launches."""

    def __init__(self, table: pa.Table) -> None:
        self.event_id, pid, self.start, self.end = (
            np.asarray(table[c].to_numpy(), np.int64) for c in table.column_names
        )
        self.sums = np.zeros(len(self.event_id), np.int64)
        self.of = {int(p): np.flatnonzero(pid == p) for p in np.unique(pid)}  # each process's ranges

    def add(self, pid: I64, start: I64, d: I64) -> None:
        """A batch of launches: their process, launch start, and GPU time."""
        if not len(pid):
            return
        one = bool((pid == pid[0]).all())
        for p in [int(pid[0])] if one else np.unique(pid).tolist():
            mine = self.of.get(p)
            if mine is None:
                continue
            at, dur = (start, d) if one else (start[pid == p], d[pid == p])
            order = np.argsort(at, kind="stable")  # the launches come nearly in time order
            at = at[order]
            upto = np.concatenate(([0], np.cumsum(dur[order])))  # the sum of the launches before each
            # the ranges whose sum the batch changes: it holds launches up to one of the range's
            # cut points (start - 1, end) and not up to the other (an end before the start too)
            cut = self.start[mine] - 1, self.end[mine]
            reached = mine[(np.minimum(*cut) < at[-1]) & (np.maximum(*cut) >= at[0])]
            inside = upto[np.searchsorted(at, self.end[reached], "right")]
            self.sums[reached] += inside - upto[np.searchsorted(at, self.start[reached], "left")]

    def table(self) -> pa.Table:
        return pa.table(
            {"tc": np.zeros(len(self.event_id), np.int64), "event_id": self.event_id, "process_gpu": self.sums}
        )
