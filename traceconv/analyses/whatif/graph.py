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
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from traceconv.analyses import intervals as I
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


NONE = np.iinfo(np.int64).min // 2  # no previous row


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
    row: I.I64  # the row's event id
    prev_end: I.I64  # the end of the row before it on its lane (:data:`NONE`: none)
    dep: I.I64  # the row (its event id) of the collective on another stream it waited for (-1: none)
    dep_gap: I.I64  # from that collective's end to the row's start


@dataclass(frozen=True)
class Graph:
    """A window of the process's calls (all of them, or those of some steps), the GPU rows they
    launched, and what the replay needs of the whole process (the process's operators, its steps,
    the usual launch delay and stream gap, the rows others wait for)."""

    calls: Calls
    gpu: Gpu
    ops: Ops
    steps: Steps
    first: bool  # the process's first window (no call before it)
    usual: tuple[int, int]  # the usual delay from a call's start to its row's, and between a stream's rows
    lane_device: I.I64  # per lane: its device
    waited: I.I64  # the rows (their event ids, sorted) that some row waits for

    @property
    def op_start(self) -> I.I64:
        return self.ops.start

    @property
    def op_end(self) -> I.I64:
        return self.ops.end

    @property
    def ranges(self) -> tuple[I.I64, I.I64]:
        return self.ops.ranges

    def op_ranges(self, pattern: str) -> tuple[I.I64, I.I64]:
        """The union of the operators (and annotations) whose name matches ``pattern`` (a regex)."""
        hit = self.ops.name.matches(pattern)
        return I.union(self.ops.start[hit], self.ops.end[hit])


@dataclass(frozen=True)
class Ops:
    """The process's CPU operators and annotations (steps aside), and their union: the host's time
    inside some operator or annotation."""

    start: I.I64
    end: I.I64
    name: Coded
    ranges: tuple[I.I64, I.I64]
    # Most launches are inside some operator or range (PyTorch's profiler, nsys --pytorch=autograd-nvtx):
    # the host's time between calls outside them is the program's own. Else the operators are not in
    # the trace, and the short gaps between calls are their dispatch.
    enclose_launches: bool
