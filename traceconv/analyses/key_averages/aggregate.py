"""FunctionEvents folded into ``key_averages()`` rows, with torch's arithmetic.

For a CPU event (``FunctionEvent``): CPU total = its duration, self CPU = minus its
children's durations; self device time = the GPU time appended to it (its own kernels),
device total = that of its subtree; memory = what :mod:`.memory` gave it, self memory =
minus its children's. A GPU event has device time = its duration and nothing else.
Events are grouped by name, device, annotation or not (and input shapes, first stack
frames), rows in the order their first event appears.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceconv.analyses.key_averages import stacks as ST
from traceconv.analyses.key_averages import tree as T
from traceconv.analyses.key_averages.events import GPU_ANNOTATION, I64, WHAT, Bools, Events, micros
from traceconv.analyses.key_averages.results import OpStats

_VALUES = (
    "self_cpu_ns",
    "cpu_total_ns",
    "self_gpu_ns",
    "gpu_total_ns",
    "cpu_mem_bytes",
    "self_cpu_mem_bytes",
    "gpu_mem_bytes",
    "self_gpu_mem_bytes",
)


@dataclass(frozen=True)
class Measured:
    """Per surviving event (list order): its figures, what it is, and its parent among them."""

    frame: pd.DataFrame
    parent: I64  # into the frame's rows, CPU events only; -1 for roots and GPU events


@dataclass(frozen=True)
class _Tree:
    """The CPU events (``cpu``: their indices), their parents among them after folding repeats,
    which are folded (and into which event), and whose kernels each one ends up with."""

    cpu: I64
    parent: I64
    folded: Bools
    kernels_of: I64
    target: I64

    def full_parent(self, n: int) -> I64:
        """Parents as indices of all ``n`` events (-1 for roots and GPU events)."""
        out = np.full(n, -1, np.int64)
        out[self.cpu] = np.where(self.parent >= 0, self.cpu[np.maximum(self.parent, 0)], -1)
        return out


def measure(ev: Events, stack_n: int = 0) -> Measured:
    """torch's per-event figures after building the tree and folding repeats."""
    ci = np.flatnonzero(ev.is_cpu)
    parent = T.parents(ev.thread[ci], ev.start[ci], ev.end[ci])
    folded, parent, kernels_of, target = T.merge_repeats(parent, ev.name[ci])
    tree = _Tree(ci, parent, folded, kernels_of, target)
    frame = pd.DataFrame(_figures(ev, tree))
    frame["name"], frame["what"], frame["user"] = ev.name, ev.what, ev.is_user
    frame["device"] = np.where(ev.is_cpu, "cpu", "cuda")
    for extra in ("flops", "shapes"):
        values = getattr(ev, extra)
        if values is not None:
            frame["input_shapes" if extra == "shapes" else extra] = values
    alive = np.ones(len(ev), bool)
    alive[ci[tree.folded]] = False
    rows = np.flatnonzero(alive)
    parent = _among(tree.full_parent(len(ev)), rows)
    if stack_n:  # an input without stacks (an Nsight Systems export) groups every event under no stack
        frame["stack"] = _stacks(ev, rows, parent, stack_n) if ev.stacks is not None else pd.Series([()] * len(ev))
    if ev.kernels_us is not None:
        _floats(frame, ev, ci, tree.parent, ~tree.folded, tree.kernels_of)
    return Measured(frame.iloc[rows].reset_index(drop=True), parent)


def _figures(ev: Events, tree: _Tree) -> dict[str, I64]:
    """Self and total CPU time, GPU time and memory of every event (folded ones: 0)."""
    ci, parent, keep = tree.cpu, tree.parent, ~tree.folded
    kernels = np.where(keep, ev.kernels_ns[ci][tree.kernels_of], 0)
    dur = np.where(keep, (ev.end - ev.start)[ci], 0)
    cpu_mem, gpu_mem = np.where(keep, ev.cpu_mem[ci], 0), np.where(keep, ev.gpu_mem[ci], 0)
    figures = {k: np.zeros(len(ev), np.int64) for k in _VALUES}
    figures["cpu_total_ns"][ci] = dur
    figures["self_cpu_ns"][ci] = dur - T.child_sums(parent, dur)
    figures["self_gpu_ns"][ci] = kernels
    figures["gpu_total_ns"][ci] = T.subtree_sums(parent, kernels)
    figures["cpu_mem_bytes"][ci], figures["gpu_mem_bytes"][ci] = cpu_mem, gpu_mem
    figures["self_cpu_mem_bytes"][ci] = cpu_mem - T.child_sums(parent, cpu_mem)
    figures["self_gpu_mem_bytes"][ci] = gpu_mem - T.child_sums(parent, gpu_mem)
    gi = np.flatnonzero(~ev.is_cpu)
    figures["self_gpu_ns"][gi] = figures["gpu_total_ns"][gi] = (ev.end - ev.start)[gi]
    if ev.launched_ns is not None:  # own view: a folded event's GPU time goes to the one it folds into
        launched = ev.launched_ns[ci].astype(np.int64).copy()
        np.add.at(launched, tree.target[tree.folded], launched[tree.folded])
        figures["launched_ns"] = np.zeros(len(ev), np.int64)
        figures["launched_ns"][ci] = np.where(keep, launched, 0)
    return figures


def _among(parent: I64, rows: I64) -> I64:
    """``parent`` (indices of all events) as positions among ``rows``."""
    remap = np.full(len(parent), -1, np.int64)
    remap[rows] = np.arange(len(rows))
    return np.where(parent[rows] >= 0, remap[np.maximum(parent[rows], 0)], -1).astype(np.int64)


def _stacks(ev: Events, rows: I64, parent: I64, stack_n: int) -> pd.Series:
    """The first ``stack_n`` frames of every event (events under a backward function: the forward's)."""
    assert ev.stacks is not None and ev.seq is not None and ev.fwd is not None
    stacks = ST.backward(
        ev.names, ev.name[rows], parent, ev.thread[rows], ev.seq[rows], ev.fwd[rows], [ev.stacks[i] for i in rows]
    )
    column: list[tuple[str, ...]] = [()] * len(ev)
    for k, i in enumerate(rows):
        column[i] = tuple(stacks[k][:stack_n])
    return pd.Series(column, dtype=object)


US = ("self_cpu_us", "cpu_total_us", "self_gpu_us", "gpu_total_us")


def _floats(frame: pd.DataFrame, ev: Events, ci: I64, parent: I64, keep: Bools, kernels_of: I64) -> None:
    """The four times in torch's own float microseconds and order of summation (for its table's digits)."""
    assert ev.kernels_us is not None
    dur = micros(ev.end, ev.origin) - micros(ev.start, ev.origin)
    cpu_dur = np.where(keep, dur[ci], 0.0)
    kernels = np.where(keep, ev.kernels_us[ci][kernels_of], 0.0)
    total = T.float_subtree(parent, kernels)
    values = {name: np.zeros(len(ev), np.float64) for name in US}
    values["cpu_total_us"][ci] = cpu_dur
    values["self_cpu_us"][ci] = cpu_dur - T.float_child_sums(parent, cpu_dur)
    values["gpu_total_us"][ci] = total
    values["self_gpu_us"][ci] = total - T.float_child_sums(parent, total)
    gi = np.flatnonzero(~ev.is_cpu)
    values["self_gpu_us"][gi] = values["gpu_total_us"][gi] = dur[gi]
    for name, v in values.items():
        frame[name] = v


def rows(measured: Measured, names: list[str], by_shape: bool, stack_n: int) -> list[OpStats]:
    """``key_averages()``: one row per (name, device, annotation or not[, shapes][, stack])."""
    frame = measured.frame
    keys = ["name", "device", "user"] + (["input_shapes"] if by_shape else []) + (["stack_key"] if stack_n else [])
    work = frame.assign(calls=1)
    if stack_n:
        work["stack_key"] = ["\x00".join(s) for s in work["stack"]]
    grouped = work.groupby(keys, sort=False, dropna=False)
    flops = "flops" in frame.columns
    sums = grouped[[*_VALUES, "calls", *(["flops"] if flops else [])]].sum()
    firsts = grouped[["what"] + (["stack"] if stack_n else [])].first()
    out = []
    for key, values in sums.iterrows():
        parts = dict(zip(keys, key if isinstance(key, tuple) else (key,), strict=True))
        first = firsts.loc[key]
        out.append(
            OpStats(
                name=names[int(parts["name"])],
                device=str(parts["device"]),
                kind=_kind(int(first["what"])),
                calls=int(values["calls"]),
                **{k: int(values[k]) for k in _VALUES},
                input_shapes=str(parts["input_shapes"]) if by_shape else None,
                flops=int(values["flops"]) if flops else None,
                stack=list(first["stack"]) if stack_n else None,
            )
        )
    return out


def torch_us(measured: Measured, by_shape: bool, stack_n: int) -> list[tuple[float, ...]]:
    """Per row of :func:`rows` (same order): torch's float sums of the four times, in list order."""
    frame = measured.frame
    if "cpu_total_us" not in frame.columns:
        return []
    keys = ["name", "device", "user"] + (["input_shapes"] if by_shape else [])
    work = frame.assign(stack_key=["\x00".join(s) for s in frame["stack"]]) if stack_n else frame
    group = work.groupby(keys + (["stack_key"] if stack_n else []), sort=False, dropna=False).ngroup().to_numpy()
    sums = np.zeros((int(group.max()) + 1 if len(group) else 0, len(US)), np.float64)
    for k, name in enumerate(US):
        np.add.at(sums[:, k], group, frame[name].to_numpy(np.float64))
    return [tuple(float(v) for v in row) for row in sums]


def _kind(what: int) -> str:
    return "annotation" if what == GPU_ANNOTATION else WHAT[what]
