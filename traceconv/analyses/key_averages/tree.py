"""torch's tree of CPU events: ``EventList._populate_cpu_children`` and ``_remove_dup_nodes``.

Per thread, in the order of the event list (start, then longest first), an event is a
child of the nearest earlier event that contains it (``start < parent end`` and ``end <=
parent end``); an event that only partly overlaps the top of torch's stack pops it for
good. The nesting is computed from depths, vectorised, and checked; a thread on which
some event only partly overlaps another is replayed event by event, as torch does.
"""

from __future__ import annotations

import numpy as np

from traceconv.analyses.key_averages.events import F64, I64, Bools


def parents(thread: I64, start: I64, end: I64) -> I64:
    """Index of each event's CPU parent, or -1. Events must be in list order (start, -end)."""
    n = len(start)
    out = np.full(n, -1, np.int64)
    if n == 0:
        return out
    order = np.lexsort((np.arange(n), thread))  # by thread, list order kept
    t, s, e = thread[order], start[order], end[order]
    code = np.cumsum(np.r_[True, t[1:] != t[:-1]]).astype(np.int64) - 1
    parent = _nested(code, s, e)
    has = parent >= 0
    p = np.maximum(parent, 0)
    broken = has & ~((s < e[p]) & (e <= e[p]))
    for c in np.unique(code[broken]):
        rows = np.flatnonzero(code == c)
        local = _stack(s[rows], e[rows])
        parent[rows] = np.where(local >= 0, rows[np.maximum(local, 0)], -1)
    ok = parent >= 0
    out[order[ok]] = order[parent[ok]]
    return out


def _nested(code: I64, s: I64, e: I64) -> I64:
    """Parents if every event nests: the last earlier event of its thread one level up."""
    n = len(s)
    pos = np.arange(n, dtype=np.int64)
    first = np.flatnonzero(np.r_[True, code[1:] != code[:-1]])
    local = pos - first[code]
    depth = local - _ended_before(code, s, e, local)
    width = int(depth.max()) + 2
    level = code * width + depth
    keys = np.sort(level * (n + 1) + pos)
    want = (level - 1) * (n + 1) + pos
    at = np.searchsorted(keys, want) - 1
    found = keys[np.maximum(at, 0)]
    hit = (depth > 0) & (at >= 0) & (found // (n + 1) == level - 1)
    return np.where(hit, found % (n + 1), -1).astype(np.int64)


def _ended_before(code: I64, s: I64, e: I64, local: I64) -> I64:
    """Per event: the earlier events of its thread that ended at or before its start."""
    times, ranks = np.unique(np.concatenate([s, e]), return_inverse=True)
    rs, re_ = ranks[: len(s)], ranks[len(s) :]
    span = len(times) + 1
    ends = np.sort(code * span + re_)
    ended = np.searchsorted(ends, code * span + rs, side="right") - np.searchsorted(ends, code * span, side="left")
    # Zero-length events that start when I start come after me in the list (they sort last
    # among equal starts), unless I am one of them and they are before me.
    zero = e == s
    if not zero.any():
        return np.asarray(ended, dtype=np.int64)
    zkeys = np.sort(code[zero] * span + rs[zero])
    k = code * span + rs
    at_start = np.searchsorted(zkeys, k, side="right") - np.searchsorted(zkeys, k, side="left")
    block = np.flatnonzero(np.r_[True, (k[1:] != k[:-1]) | ~zero[:-1] | ~zero[1:]])  # runs of equal keys
    run_start = block[np.searchsorted(block, np.arange(len(s)), side="right") - 1]
    before_me = np.where(zero, np.arange(len(s)) - run_start, 0)
    return np.asarray(ended - at_start + before_me, dtype=np.int64)


def _stack(s: I64, e: I64) -> I64:
    """torch's own loop for one thread: each event's parent position, -1 for roots."""
    out = np.full(len(s), -1, np.int64)
    current: list[int] = []
    starts, ends = s.tolist(), e.tolist()
    for i in range(len(starts)):
        while current:
            top = current[-1]
            if starts[i] >= ends[top] or ends[i] > ends[top]:
                current.pop()
            else:
                out[i] = top
                break
        current.append(i)
    return out


def merge_repeats(parent: I64, name: I64) -> tuple[Bools, I64, I64, I64]:
    """torch's ``_remove_dup_nodes``: an event whose parent has its name and no other child is folded in.

    Returns the folded events, the parents of the rest (a folded parent replaced by the
    event it folded into), per event whose kernels it ends up with (torch lifts a folded
    event's kernels into the event it folds into, replacing that one's own), and per folded
    event the one it folds into (-1 for the others).
    """
    n = len(parent)
    has = parent >= 0
    p = np.maximum(parent, 0)
    only = np.bincount(parent[has], minlength=n)[p] == 1
    folded = has & only & (name == name[p])
    target = np.where(folded, parent, -1)
    while True:  # a chain of repeats folds into its first event that is not folded
        deeper = (target >= 0) & folded[np.maximum(target, 0)]
        if not deeper.any():
            break
        target[deeper] = parent[target[deeper]]
    new_parent = parent.copy()
    up = has & folded[p] & ~folded
    new_parent[up] = target[parent[up]]
    deepest = np.full(n, -1, np.int64)
    rows = np.flatnonzero(folded)  # list order: the deepest of a chain comes last and wins
    np.maximum.at(deepest, target[rows], rows)
    kernels_of = np.where(deepest >= 0, deepest, np.arange(n, dtype=np.int64))
    new_parent[folded] = -1
    return folded, new_parent, kernels_of, target


def subtree_sums(parent: I64, values: I64) -> I64:
    """Each event's value plus its descendants' values."""
    total = values.astype(np.int64).copy()
    node = np.flatnonzero(parent >= 0)
    carry = values[node].astype(np.int64)
    up = parent[node]
    while len(node):
        np.add.at(total, up, carry)
        more = parent[up] >= 0
        carry, up = carry[more], parent[up[more]]
        node = node[more]
    return np.asarray(total, dtype=np.int64)


def child_sums(parent: I64, values: I64) -> I64:
    """Sum of ``values`` over each event's direct children."""
    out = np.zeros(len(parent), np.int64)
    has = parent >= 0
    np.add.at(out, parent[has], values[has].astype(np.int64))
    return out


def float_child_sums(parent: I64, values: F64) -> F64:
    """Sum of ``values`` over each event's direct children, added in list order (as torch's ``sum``)."""
    out = np.zeros(len(parent), np.float64)
    has = np.flatnonzero(parent >= 0)
    np.add.at(out, parent[has], values[has])
    return out


def float_subtree(parent: I64, values: F64) -> F64:
    """torch's recursive ``device_time_total``: own values, plus the children's totals in list order."""
    n = len(parent)
    depth = np.zeros(n, np.int64)
    node = np.flatnonzero(parent >= 0)
    up = parent[node]
    while len(node):
        depth[node] += 1
        more = parent[up] >= 0
        node, up = node[more], parent[up[more]]
    total = values.astype(np.float64).copy()
    children = np.zeros(n, np.float64)
    for d in range(int(depth.max()) if n else 0, 0, -1):
        rows = np.flatnonzero(depth == d)
        total[rows] = values[rows] + children[rows]
        np.add.at(children, parent[rows], total[rows])
    roots = depth == 0
    total[roots] = values[roots] + children[roots]
    return np.asarray(total, dtype=np.float64)
