"""Launch, queue, execution and wall time of every kernel, with NVIDIA's definitions.

For a GPU operation and the API call that launched it (as ``nsys stats --report
cuda_kern_exec_trace`` defines them):

- API time: ``launch_end_ns - launch_start_ns``;
- queue time: ``start_ns - launch_end_ns`` when >= 0, else null (the GPU started the work
  before the call returned);
- execution time: ``end_ns - start_ns``;
- total (wall) time: ``max(launch_end_ns, end_ns) - launch_start_ns``.

The readers put these on every GPU row (``queue_ns``, ``wall_ns``); this module tabulates
them. GPU rows with no launching call in the trace are kept, with null API, queue and
wall times, and counted (``no_launch``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from traceconv.analyses.common import Data, describe, frame
from traceconv.errors import UsageError

# The columns of per_launch(), in the order of NVIDIA's cuda_kern_exec_trace.
PER_LAUNCH = (
    "api_start_ns",
    "api_dur_ns",
    "queue_start_ns",
    "queue_dur_ns",
    "kernel_start_ns",
    "kernel_dur_ns",
    "total_dur_ns",
    "pid",
    "tid",
    "device",
    "context",
    "stream",
    "launch_name",
    "name",
    "kind",
    "correlation_id",
    "trace_id",
    "op_name",
)
# The durations summarised per group: output prefix -> per_launch() column.
MEASURES = {"exec": "kernel_dur_ns", "queue": "queue_dur_ns", "api": "api_dur_ns", "wall": "total_dur_ns"}
# Named groupings of summary(); any sequence of per_launch() columns works too.
GROUPINGS: dict[str, tuple[str, ...]] = {
    "name": ("name",),
    "launch": ("launch_name",),
    "op": ("op_name",),  # the operator (PyTorch) or NVTX range (Nsight Systems) the kernel came from
    # cuda_kern_exec_sum's grouping: launching process and thread, device, API, kernel.
    "exec": ("pid", "tid", "device", "launch_name", "name"),
}
DEFAULT_KINDS = ("kernel",)

_GPU_COLUMNS = (
    "trace_id",
    "source",
    "kind",
    "name",
    "start_ns",
    "dur_ns",
    "pid",
    "device",
    "context",
    "stream",
    "correlation_id",
    "launch_event_id",
    "launch_name",
    "launch_start_ns",
    "launch_end_ns",
    "launch_tid",
    "queue_ns",
    "wall_ns",
    "op_name",
)
_API_COLUMNS = ("trace_id", "event_id", "pid")
# What per_launch() and summary() read: load(path, columns=INPUT_COLUMNS, kinds=input_kinds(...)).
INPUT_COLUMNS = tuple(dict.fromkeys((*_GPU_COLUMNS, *_API_COLUMNS)))


def input_kinds(kinds: Sequence[str] = DEFAULT_KINDS) -> list[str]:
    """The row kinds to load for ``kinds`` of GPU work: those and the API calls that launch them."""
    return [*kinds, "cuda_api"]


def per_launch(data: Data, kinds: Sequence[str] = DEFAULT_KINDS) -> pd.DataFrame:
    """One row per GPU operation of ``kinds``, like ``cuda_kern_exec_trace``, in launch order.

    ``pid`` and ``tid`` are those of the launching call (a PyTorch trace gives GPU rows the
    device as pid, so the launching row's pid is looked up by ``launch_event_id``). Rows
    with no launching call are kept with null API, queue and total times and are ordered
    by their own start.
    """
    gpu = frame(data, _GPU_COLUMNS, kinds)
    api_dur = gpu["launch_end_ns"] - gpu["launch_start_ns"]
    out = pd.DataFrame(
        {
            "api_start_ns": gpu["launch_start_ns"],
            "api_dur_ns": api_dur,
            "queue_start_ns": gpu["launch_end_ns"].where(gpu["queue_ns"].notna()),
            "queue_dur_ns": gpu["queue_ns"],
            "kernel_start_ns": gpu["start_ns"],
            "kernel_dur_ns": gpu["dur_ns"],
            "total_dur_ns": gpu["wall_ns"],
            "pid": _launch_pid(data, gpu),
            "tid": gpu["launch_tid"],
            "device": gpu["device"].astype("Int64"),
            "context": gpu["context"],
            "stream": gpu["stream"],
            "launch_name": gpu["launch_name"],
            "name": gpu["name"],
            "kind": gpu["kind"],
            "correlation_id": gpu["correlation_id"],
            "trace_id": gpu["trace_id"],
            "op_name": gpu["op_name"],
        }
    )
    order = out["api_start_ns"].fillna(out["kernel_start_ns"])
    keys = pd.DataFrame({"a": order, "k": out["kernel_start_ns"]})
    ordered: pd.DataFrame = out.loc[keys.sort_values(["a", "k"], kind="stable").index].reset_index(drop=True)
    return ordered


def _launch_pid(data: Data, gpu: pd.DataFrame) -> pd.Series:
    """The process of the launching call; for traces other than PyTorch, the GPU row's own pid as fallback."""
    api = frame(data, _API_COLUMNS, ["cuda_api"])
    left = pd.DataFrame({"trace_id": gpu["trace_id"].astype("string"), "event_id": gpu["launch_event_id"]})
    right = pd.DataFrame(
        {"trace_id": api["trace_id"].astype("string"), "event_id": api["event_id"], "launch_pid": api["pid"]}
    )
    merged = left.merge(right, on=["trace_id", "event_id"], how="left", validate="many_to_one")
    pid = pd.Series(merged["launch_pid"].to_numpy(), index=gpu.index, dtype="Int64")
    own = gpu["pid"].where(gpu["source"].astype("string") != "pytorch")
    found: pd.Series[Any] = pid.fillna(own) if len(pid) else pid
    return found


def summary(data: Data, by: str | Sequence[str] = "name", kinds: Sequence[str] = DEFAULT_KINDS) -> pd.DataFrame:
    """Per group: count and total/avg/median/min/max/stddev of execution, queue, API and wall time.

    ``by``: ``"name"`` (the kernel, as ``cuda_gpu_kern_sum``), ``"launch"`` (the launching
    API call), ``"exec"`` (process, thread, device, API and kernel, as
    ``cuda_kern_exec_sum``) or a sequence of :data:`PER_LAUNCH` columns. ``data`` is a
    unified table or a :func:`per_launch` result.

    Columns: the keys; ``count``; ``no_launch`` (rows with no launching call in the trace:
    counted in ``exec_*``, absent from ``api_*`` and ``wall_*``); ``queued`` (rows with a
    queue time, NVIDIA's QCount); ``time_pct`` (share of the summed execution time of all
    groups); then ``{exec,queue,api,wall}_{total,avg,med,min,max,std}_ns``. Sorted as NVIDIA
    sorts: total execution time descending, then count, then keys.
    """
    keys = list(GROUPINGS[by]) if isinstance(by, str) and by in GROUPINGS else _keys(by)
    rows = data if _is_per_launch(data) else per_launch(data, kinds)
    assert isinstance(rows, pd.DataFrame)
    grouped = rows.groupby(keys, observed=True, dropna=False, sort=False)
    parts = {prefix: describe(grouped[col], prefix) for prefix, col in MEASURES.items()}
    exec_total = parts["exec"]["exec_total_ns"].fillna(0)
    grand = int(exec_total.sum())
    head = pd.DataFrame(
        {
            "count": grouped.size().astype("int64"),
            "no_launch": (grouped.size() - grouped["api_start_ns"].count()).astype("int64"),
            "queued": parts["queue"]["queue_count"],
            "time_pct": exec_total.astype("float64") * 100.0 / grand if grand else 0.0,
        }
    )
    body = [p.drop(columns=f"{prefix}_count") for prefix, p in parts.items()]
    out = pd.concat([head, *body], axis=1).reset_index()
    out = out.sort_values(
        ["exec_total_ns", "count", *keys],
        ascending=[False, True, *[True] * len(keys)],
        kind="stable",
        na_position="last",
        key=_sortable,
    )
    result: pd.DataFrame = out.reset_index(drop=True)
    return result


def longest(rows: pd.DataFrame, n: int) -> pd.DataFrame:
    """The ``n`` rows of :func:`per_launch` with the longest execution time, longest first."""
    order = rows["kernel_dur_ns"].sort_values(ascending=False, kind="stable", na_position="last").index
    top: pd.DataFrame = rows.loc[order[:n]].reset_index(drop=True)
    return top


@dataclass(frozen=True)
class LaunchTotals:
    """Figures for a footer of :func:`per_launch` rows: rows, rows with no launching call, queued rows."""

    rows: int
    no_launch: int
    queued: int
    exec_total_ns: int


@dataclass(frozen=True)
class GroupTotals:
    """Figures for a footer of a :func:`summary`: rows, groups, rows with no launching call, execution time."""

    rows: int
    groups: int
    no_launch: int
    queued: int
    exec_total_ns: int


def launch_totals(rows: pd.DataFrame) -> LaunchTotals:
    return LaunchTotals(
        rows=len(rows),
        no_launch=int(rows["api_start_ns"].isna().sum()),
        queued=int(rows["queue_dur_ns"].notna().sum()),
        exec_total_ns=int(rows["kernel_dur_ns"].fillna(0).sum()),
    )


def totals(table: pd.DataFrame) -> GroupTotals:
    return GroupTotals(
        rows=int(table["count"].sum()),
        groups=len(table),
        no_launch=int(table["no_launch"].sum()),
        queued=int(table["queued"].sum()),
        exec_total_ns=int(table["exec_total_ns"].fillna(0).sum()),
    )


@dataclass(frozen=True)
class KernelReport:
    """What ``traceconv kernels`` shows: the rows (per launch, or per group ``by``) and their totals."""

    rows: pd.DataFrame
    totals: LaunchTotals | GroupTotals
    kinds: tuple[str, ...]
    by: str | None  # None: one row per launch
    keys: tuple[str, ...]  # the grouping columns (none per launch)


def report(data: Data, kinds: Sequence[str] = DEFAULT_KINDS, by: str | None = "name", limit: int = 0) -> KernelReport:
    """Per launch (``by=None``, the ``limit`` longest) or per group (the ``limit`` with most execution time)."""
    rows = per_launch(data, kinds)
    if by is None:
        return KernelReport(longest(rows, limit) if limit else rows, launch_totals(rows), tuple(kinds), None, ())
    result = summary(rows, by)
    keys = GROUPINGS[by] if by in GROUPINGS else tuple(_keys(by))
    return KernelReport(result.head(limit) if limit else result, totals(result), tuple(kinds), by, keys)


def _keys(by: str | Sequence[str]) -> list[str]:
    keys = [by] if isinstance(by, str) else list(by)
    unknown = [k for k in keys if k not in PER_LAUNCH]
    if unknown or not keys:
        raise UsageError(
            None,
            f"cannot group kernels by {', '.join(unknown) or 'nothing'}",
            f"use {', '.join(GROUPINGS)} or columns of per_launch(): {', '.join(PER_LAUNCH)}",
        )
    return keys


def _sortable(col: pd.Series) -> pd.Series:
    """Categoricals sort by their text, not by the order their categories were first seen."""
    return col.astype("string") if isinstance(col.dtype, pd.CategoricalDtype) else col


def _is_per_launch(data: Data) -> bool:
    return isinstance(data, pd.DataFrame) and list(data.columns) == list(PER_LAUNCH)
