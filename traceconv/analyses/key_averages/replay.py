"""torch's ``build_tree`` replayed on the thread that finished profiling, for the events Kineto
collected without an operator to hang them on.

Kineto's own work (``overhead``), the GPU side of ``record_function`` ranges and API calls
or GPU work with no operator have no parent until ``torch/csrc/profiler/collection.cpp``
(``build_tree``) pushes them, by start time, onto the stack of the thread that stops the
profiler, among that thread's operators and Python functions. Their correlation id is
then their parent's (``kinetoEventCorrelationID``): a profiler-overhead event inside an
operator gets that operator's id, and with it a copy of that operator's GPU time
(``_parse_kineto_results`` appends the kernels of an id to every event that has it).

The replay keeps torch's quirks: a range is closed when an event starts strictly after its
end; closing a range closes everything pushed after it; zero-length events are never pushed.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from traceconv.analyses.key_averages.events import I64, Bools


@dataclass(frozen=True)
class Stacked:
    """Events on one thread in torch's push order, with what the replay needs of each."""

    start: I64
    end: I64  # -1: never ended (stays open until a range below it closes)
    corr: I64  # own correlation id: 0 = take the parent's (Kineto events)
    inherits: Bools  # True where ``corr`` 0 means "the parent's" (Kineto events), not "none" (Python)


def parents(start: I64, end: I64) -> I64:
    """Parent (index) of each event in torch's stack replay; events are in push order."""
    n = len(start)
    parent = [-1] * n
    finished = bytearray(n)
    heap: list[tuple[int, int]] = []
    top = -1
    starts, ends = start.tolist(), end.tolist()
    for i in range(n):
        s = starts[i]
        while heap and heap[0][0] < s:
            j = heapq.heappop(heap)[1]
            if finished[j]:
                continue
            while top != j:  # everything pushed after j closes with it
                finished[top] = 1
                top = parent[top]
            finished[j] = 1
            top = parent[j]
        parent[i] = top
        e = ends[i]
        if e < 0:
            top = i
        elif e > s:
            top = i
            heapq.heappush(heap, (e, i))
        else:
            finished[i] = 1
    return np.asarray(parent, dtype=np.int64)


def correlations(stacked: Stacked) -> tuple[I64, I64]:
    """Per event: the correlation id torch gives it, and its parent in the replay."""
    parent = parents(stacked.start, stacked.end)
    corr = stacked.corr.copy()
    pending = np.flatnonzero(stacked.inherits & (corr == 0))
    node = parent[pending]
    while len(pending):  # walk up until an event with an id of its own (or none left)
        has = node >= 0
        pending, node = pending[has], node[has]
        got = corr[node]
        found = (got != 0) | ~stacked.inherits[node]
        corr[pending[found]] = got[found]
        pending, node = pending[~found], parent[node[~found]]
    return corr, parent


def order(start: I64, rank: I64, row: I64) -> I64:
    """torch's push order: by start time, operators and Python functions before Kineto events."""
    return np.lexsort((row, rank, start))
