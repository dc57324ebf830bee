"""A unified table narrowed to what summary and diff read, with the op tree of every CPU thread.

:func:`prepare` returns :class:`Frames`: the GPU rows, the host ranges (CPU operators,
host-side annotations and NVTX ranges, CUDA API calls) each with its parent on its thread,
and per range the GPU time it launched (self and including children) and its own CPU time.
Steps (``ProfilerStep#N``, NVTX ``step_N`` ...) are found here too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from traceconv import schema as S
from traceconv.analyses import intervals as I
from traceconv.analyses.common import frame
from traceconv.analyses.fixes import Program
from traceconv.analyses.steps import STEP_PATTERN, Steps, find_steps, step_label, step_regex

# Ranges marking one training/inference step; the first match on a thread wins over nested ones.
RANGE_KINDS = ("cpu_op", "nvtx", "cuda_api")
OP_KINDS = ("cpu_op", "nvtx")
_EMIT_NVTX = re.compile(r", (seq|op_id|sizes|input_op_ids) = .*$", re.DOTALL)
NO_OP = "(no operator)"

_GPU_COLS = (
    "trace_id",
    "kind",
    "name",
    "short_name",
    "start_ns",
    "end_ns",
    "dur_ns",
    "device",
    "launch_event_id",
    "launch_start_ns",
    "launch_end_ns",
    "queue_ns",
    "op_event_id",
    "op_name",
    "occupancy_pct",
    "bytes",
    "copy_kind",
    "src_kind",
    "dst_kind",
)
_RANGE_COLS = (
    "trace_id",
    "event_id",
    "kind",
    "name",
    "start_ns",
    "end_ns",
    "dur_ns",
    "pid",
    "tid",
    "device",
    "op_name",
    "correlation_id",
)
_SYNC_COLS = ("trace_id", "name", "start_ns", "end_ns", "dur_ns", "sync_type", "correlation_id", "op_name")
_MEM_COLS = ("device", "start_ns", "total_allocated_bytes", "total_reserved_bytes")
# What prepare() reads: load(path, columns=INPUT_COLUMNS).
INPUT_COLUMNS = tuple(dict.fromkeys(("source", *_GPU_COLS, *_RANGE_COLS, *_SYNC_COLS, *_MEM_COLS, "args")))


@dataclass(frozen=True)
class Frames:
    source: str
    window: tuple[int, int]
    gpu: pd.DataFrame
    ranges: pd.DataFrame
    sync: pd.DataFrame
    memory: pd.DataFrame
    steps: Steps | None
    table: pa.Table  # for the rarely read args (input shapes)
    program: Program


def prepare(table: pa.Table, step_pattern: str = STEP_PATTERN) -> Frames:
    """Narrow ``table`` (unified schema, e.g. from ``load``) to the frames the summary reads."""
    step_re = step_regex(step_pattern)
    ranges = _ranges(table, step_re)
    gpu = frame(table, _GPU_COLS, S.GPU_KINDS)
    gpu["anchor_ns"] = gpu["launch_start_ns"].fillna(gpu["start_ns"])
    _attribute(ranges, gpu)
    sync = frame(table, _SYNC_COLS, ["sync"])
    for df in (gpu, ranges, sync):  # a step as the operator of a launch or sync: one name for all steps
        df["op_name"] = _names(df["op_name"], step_re)
    memory = frame(table, _MEM_COLS, ["memory"])
    source = _source(table)
    return Frames(
        source=source,
        window=_window(gpu, ranges, sync),
        gpu=gpu,
        ranges=ranges,
        sync=sync,
        memory=memory,
        steps=find_steps(ranges),
        table=table,
        program=program_of(source, ranges, gpu),
    )


_PYTORCH = re.compile(r"^(aten::|ProfilerStep#|autograd::|torch\.)|at::native::|at::cuda::|\bc10::")
_GRAPH_LAUNCH = re.compile(r"^(cuda|hip|cu)Graph(Launch|Replay)")


def program_of(source: str, ranges: pd.DataFrame, gpu: pd.DataFrame) -> Program:
    """PyTorch or another CUDA program, and whether it already replays CUDA graphs."""
    names = pd.concat([ranges["name"].astype(object), gpu["name"].astype(object)]).dropna().unique()
    torch = "pytorch" in source or any(_PYTORCH.search(str(n)) for n in names)
    api = ranges.loc[ranges["kind"] == "cuda_api", "name"].astype(object).dropna().unique()
    return Program("pytorch" if torch else "cuda", cuda_graphs=any(_GRAPH_LAUNCH.match(str(n)) for n in api))


def _source(table: pa.Table) -> str:
    values = pc.unique(table["source"].cast(pa.string())).drop_null().to_pylist() if table.num_rows else []
    return "+".join(sorted(str(v) for v in values)) or "unknown"


def _window(*parts: pd.DataFrame) -> tuple[int, int]:
    lows = [p["start_ns"].min() for p in parts if len(p)]
    highs = [p["end_ns"].max() for p in parts if len(p)]
    lows, highs = [v for v in lows if not pd.isna(v)], [v for v in highs if not pd.isna(v)]
    if not lows or not highs:
        return 0, 0
    return int(min(lows)), int(max(highs))


def _ranges(table: pa.Table, step_re: re.Pattern[str]) -> pd.DataFrame:
    df = frame(table, _RANGE_COLS, RANGE_KINDS)
    host = df["device"].isna() | (df["kind"] != "nvtx")  # nvtx rows with a device are GPU-side projections
    df = df[host & df["start_ns"].notna()].reset_index(drop=True)
    df["end_ns"] = df["end_ns"].fillna(df["end_ns"].max())  # a range that never ended runs to the end
    df["is_op"] = df["kind"].isin(OP_KINDS).to_numpy()
    df["is_step"] = df["is_op"] & _matches(df["name"], step_re)
    df["label"] = _names(df["name"], step_re)
    group = (
        _codes(df["trace_id"]) * (1 << 42)
        + pd.factorize(pd.MultiIndex.from_arrays([df["pid"].fillna(-1), df["tid"].fillna(-1)]))[0]
    )
    df["parent"] = I.parents(group.astype(np.int64), i64(df["start_ns"]), i64(df["end_ns"]))
    out: pd.DataFrame = df
    return out


def _attribute(ranges: pd.DataFrame, gpu: pd.DataFrame) -> None:
    """GPU time per range (self: the rows attributed to it; total: also those of its descendants)."""
    traces = pd.Index(pd.unique(ranges["trace_id"].astype(object).fillna("")))
    key = pd.Index(_key(traces, ranges["trace_id"], ranges["event_id"]))
    if not key.is_unique:
        raise ValueError("event_id repeats within a trace: the input is not in the unified schema")
    op_node = _find(key, _key(traces, gpu["trace_id"], gpu["op_event_id"]))
    launch_node = _find(key, _key(traces, gpu["trace_id"], gpu["launch_event_id"]))
    first = np.where(launch_node >= 0, launch_node, op_node)
    n, dur = len(ranges), gpu["dur_ns"].fillna(0).to_numpy(np.float64)
    parent = ranges["parent"].to_numpy(np.int64)
    ranges["gpu_self_ns"] = _sum_at(op_node, dur, n)
    ranges["gpu_process_ns"] = _process_gpu(ranges, gpu, launch_node, dur)
    total = np.zeros(n)
    for rows, node in I.ancestors(parent, first):
        total += np.bincount(node, weights=dur[rows], minlength=n)
    ranges["gpu_total_ns"] = np.rint(total).astype(np.int64)
    child = parent >= 0
    children = np.bincount(parent[child], weights=ranges["dur_ns"].fillna(0).to_numpy(np.float64)[child], minlength=n)
    ranges["cpu_self_ns"] = np.maximum(ranges["dur_ns"].fillna(0).to_numpy(np.float64) - children, 0).astype(np.int64)
    _merge_repeats(ranges, parent)
    region = _regions(ranges, parent)
    ranges["region"] = region
    gpu["region"] = pd.Series(_pick(region.to_numpy(object), first), index=gpu.index, dtype="object")


def _process_gpu(ranges: pd.DataFrame, gpu: pd.DataFrame, launch_node: I.I64, dur: Any) -> I.I64:
    """Per NVTX range or annotation: the GPU time of the work launched while it was open by any
    thread of its process (its launching call starts inside the range); other ranges get 0.

    NVIDIA's NVTX projection (``gpu_total_ns``) counts the range's own thread only; a backward
    pass launched from autograd threads inside a ``record_function("backward")`` is counted here.
    """
    out = np.zeros(len(ranges), dtype=np.int64)
    launched = np.flatnonzero(launch_node >= 0)
    is_range = (ranges["kind"] == "nvtx").to_numpy()
    if not len(launched) or not is_range.any():
        return out
    node = launch_node[launched]
    trace = _codes(ranges["trace_id"])
    pid = ranges["pid"].fillna(-1).to_numpy(np.int64)
    at = gpu["launch_start_ns"].to_numpy(np.int64, na_value=0)[launched]
    weight = np.asarray(dur)[launched]
    for (t, p), rows in pd.Series(np.arange(len(node))).groupby([trace[node], pid[node]]):
        order = rows.to_numpy()[np.argsort(at[rows.to_numpy()], kind="stable")]
        times, cum = at[order], np.concatenate([[0.0], np.cumsum(weight[order])])
        mine = np.flatnonzero(is_range & (trace == t) & (pid == p))
        lo = np.searchsorted(times, i64(ranges["start_ns"].iloc[mine]), side="left")
        hi = np.searchsorted(times, i64(ranges["end_ns"].iloc[mine]), side="right")
        out[mine] = np.rint(cum[hi] - cum[lo]).astype(np.int64)
    return out


def _merge_repeats(ranges: pd.DataFrame, parent: I.I64) -> None:
    """Fold an operator into its parent when the parent has the same name and no other child.

    ``torch.profiler`` does the same (``EventList._remove_dup_nodes``: ``aten::sum`` calling
    itself through another overload is one call), so calls and times agree with
    ``key_averages()``. The folded row is marked ``merged``; its self times move to the row
    it folds into, whose total times already include it.
    """
    n = len(ranges)
    label = ranges["label"].cat.codes.to_numpy()
    has_parent = parent >= 0
    p = np.maximum(parent, 0)
    only_child = np.bincount(parent[has_parent], minlength=n)[p] == 1
    merged = has_parent & only_child & (label == label[p]) & (label >= 0) & ranges["is_op"].to_numpy()
    ranges["merged"] = merged
    if not merged.any():
        return
    target = np.where(merged, parent, -1)
    while True:  # a chain of repeats folds into its first non-repeat
        deeper = (target >= 0) & merged[np.maximum(target, 0)]
        if not deeper.any():
            break
        target[deeper] = parent[target[deeper]]
    rows = np.flatnonzero(merged)
    for col in ("cpu_self_ns", "gpu_self_ns"):
        values = ranges[col].to_numpy(np.int64).copy()
        np.add.at(values, target[rows], values[rows])
        values[rows] = 0
        ranges[col] = values


def _regions(ranges: pd.DataFrame, parent: I.I64) -> pd.Series:
    """Per range: the name of the innermost host annotation or NVTX range around it that is not a step."""
    is_region = ((ranges["kind"] == "nvtx") & ~ranges["is_step"]).to_numpy()
    found = np.full(len(ranges), -1, dtype=np.int64)
    for rows, node in I.ancestors(parent, np.arange(len(ranges), dtype=np.int64)):
        hit = (found[rows] < 0) & is_region[node]
        found[rows[hit]] = node[hit]
    labels = ranges["label"].astype(object).to_numpy()
    out: pd.Series = pd.Series(_pick(labels, found), index=ranges.index, dtype="object")
    return out


def _names(names: pd.Series, step_re: re.Pattern[str]) -> pd.Series:
    """Range names as grouped: steps as one name, and ``torch.autograd.profiler.emit_nvtx``'s
    per-call suffixes (``aten::mm, seq = 12, op_id = 34, sizes = [...]``) dropped."""
    names = _relabel(names, _matches(names, _EMIT_NVTX), lambda s: _EMIT_NVTX.sub("", s))
    return _relabel(names, _matches(names, step_re), step_label)


# -- small helpers ------------------------------------------------------------------------------
def i64(s: pd.Series) -> I.I64:
    return np.asarray(s.to_numpy(dtype=np.int64, na_value=0), dtype=np.int64)


def _pick(values: Any, index: I.I64) -> Any:
    """``values[index]`` as an object array, None where ``index`` is -1."""
    out = np.full(len(index), None, dtype=object)
    ok = index >= 0
    out[ok] = values[index[ok]]
    return out


def _codes(s: pd.Series) -> I.I64:
    return np.asarray(pd.factorize(s.astype(object))[0], dtype=np.int64)


def _key(traces: pd.Index, trace: pd.Series, ids: pd.Series) -> I.I64:
    """One int64 per (trace, event id); -1 where either is unknown."""
    code = traces.get_indexer(pd.Index(trace.astype(object).fillna(""))).astype(np.int64)
    eid = ids.to_numpy(dtype=np.int64, na_value=-1)
    return np.asarray(np.where((code >= 0) & (eid >= 0), code * (1 << 40) + eid, -1), dtype=np.int64)


def _find(key: pd.Index, wanted: I.I64) -> I.I64:
    found = np.asarray(key.get_indexer(pd.Index(wanted)), dtype=np.int64)
    return np.where(wanted >= 0, found, -1)


def _sum_at(index: I.I64, weights: Any, n: int) -> I.I64:
    ok = index >= 0
    return np.rint(np.bincount(index[ok], weights=weights[ok], minlength=n)).astype(np.int64)


def _matches(names: pd.Series, pattern: re.Pattern[str]) -> I.Bools:
    cats = names.cat.categories
    hit = np.array([bool(pattern.search(str(c))) for c in cats] + [False], dtype=bool)
    return np.asarray(hit[names.cat.codes.to_numpy()], dtype=bool)


def _relabel(names: pd.Series, where: Any, func: Any) -> pd.Series:
    """``names`` with ``func`` applied where ``where`` holds, computed once per distinct name."""
    text = names.astype(object).to_numpy()
    out = text.copy()
    if len(out) and np.any(where):
        mapped = {v: func(v) for v in set(text[where])}
        out[where] = [mapped[v] for v in text[where]]
    result: pd.Series = pd.Series(out, index=names.index).astype("category")
    return result
