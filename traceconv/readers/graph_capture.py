"""CUDA graph replays back to the launches that captured them, where the capture is in the trace.

A replayed kernel, copy or memset is launched by a ``cudaGraphLaunch`` (``cuGraphLaunch``): the
operator around that call is whatever replays the graph, not the one whose code made the kernel.
When the capture is in the trace, its launch calls are there: calls that launch GPU work (kernel
launches, copies, memsets) with no GPU row of their own (a captured launch runs nothing), made one
after another on a thread before the ``cudaGraphInstantiate`` that made the graph (a launch that ran
ends the run). A replay with as many rows as a capture has launches, the last such capture to end
before the replay starts, is that capture's: its ``i``-th row (in start order) is the ``i``-th
captured launch (one stream replays in capture order). A replay that no capture fits keeps the
operator around its launch.

Format-agnostic (numpy in, numpy out): a reader gives its API calls and its replayed rows and takes,
per replayed row, the call that captured it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]

LAUNCHES = ("LaunchKernel", "Memcpy", "Memset", "LaunchCooperativeKernel")  # calls that launch GPU work
GRAPH_LAUNCH = "GraphLaunch"
INSTANTIATE = "GraphInstantiate"
OTHER, LAUNCH, REPLAY, END = 0, 1, 2, 3  # what an API call is to a capture (call_roles)


def call_roles(names: Sequence[str | None]) -> npt.NDArray[np.int8]:
    """Per API call name: :data:`LAUNCH` (it launches GPU work), :data:`REPLAY` (it launches a
    graph), :data:`END` (it instantiates a graph: the capture before it is over), else :data:`OTHER`."""

    def role(name: str | None) -> int:
        if not name:
            return OTHER
        if GRAPH_LAUNCH in name:
            return REPLAY
        if INSTANTIATE in name:
            return END
        return LAUNCH if any(n in name for n in LAUNCHES) else OTHER

    return np.array([role(n) for n in names], dtype=np.int8)


@dataclass(frozen=True)
class Calls:
    """A trace's API calls: thread (one integer per thread of a process), start, role
    (:func:`call_roles` of its name) and whether GPU work carries its correlation (``ran``)."""

    thread: I64
    start: I64
    role: npt.NDArray[np.int8]
    ran: Bools


@dataclass(frozen=True)
class _Captures:
    end: I64  # the start of the instantiation that closed each capture
    first: I64  # where each capture's launches start in ``launches``
    size: I64
    launches: I64  # the calls of every capture, in order


def captured_by(calls: Calls, launch: I64, start: I64, order: I64) -> I64:
    """For each replayed row (its graph launch call ``launch``, an index into ``calls``; its ``start``;
    ``order``: ties of start broken by it), the index of the call that captured it, -1 where no
    capture in the trace fits its replay."""
    out = np.full(len(launch), -1, dtype=np.int64)
    caps = _captures(calls)
    if not len(caps.end) or not len(launch):
        return out
    rows = np.lexsort((order, start, launch))
    group = np.r_[True, launch[rows][1:] != launch[rows][:-1]]
    first = np.flatnonzero(group)
    size = np.diff(np.r_[first, len(rows)])
    pos = np.arange(len(rows)) - np.repeat(first, size)  # a row's place in its replay
    replay_start = start[rows][first]
    for n in np.unique(size):
        mine = np.flatnonzero(caps.size == n)
        if not len(mine):
            continue
        mine = mine[np.argsort(caps.end[mine], kind="stable")]
        at = np.searchsorted(caps.end[mine], replay_start, side="right") - 1  # the last to end by the replay
        fits = (size == n) & (at >= 0)
        cap = np.repeat(np.where(fits, mine[np.maximum(at, 0)], -1), size)
        take = cap >= 0
        out[rows[take]] = caps.launches[caps.first[cap[take]] + pos[take]]
    return out


def _captures(calls: Calls) -> _Captures:
    """The runs of launch calls that ran nothing just before each instantiation, per thread."""
    sel = np.flatnonzero((calls.role == LAUNCH) | (calls.role == END))
    if not len(sel):
        none = np.zeros(0, dtype=np.int64)
        return _Captures(none, none, none, none)
    sel = sel[np.lexsort((sel, calls.start[sel], calls.thread[sel]))]
    thread, role = calls.thread[sel], calls.role[sel]
    pending = (role == LAUNCH) & ~calls.ran[sel]
    new_thread = np.r_[True, thread[1:] != thread[:-1]]
    run = np.cumsum(~pending | new_thread)  # the pending launches of one run share its number
    ends = np.flatnonzero((role == END) & ~new_thread)
    ends = ends[pending[ends - 1]]  # an instantiation right after a pending launch on its thread
    pend = np.flatnonzero(pending)
    lo = np.searchsorted(run[pend], run[ends - 1], side="left")
    hi = np.searchsorted(run[pend], run[ends - 1], side="right")
    size = (hi - lo).astype(np.int64)
    members = pend[np.repeat(lo, size) + np.arange(int(size.sum())) - np.repeat(np.cumsum(size) - size, size)]
    return _Captures(calls.start[sel[ends]], np.cumsum(size) - size, size, sel[members])
