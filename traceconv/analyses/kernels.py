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

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
import pyarrow as pa

from traceconv.analyses import metrics as U
from traceconv.analyses.common import Data
from traceconv.analyses.compiled.names import fused_ops
from traceconv.analyses.roofline.results import KernelRoof
from traceconv.analyses.source import Source, literals
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


def default_kinds(source: Source) -> tuple[str, ...]:
    """Kernels, and CUDA graphs that Nsight Systems traced whole (its default) where the input has them:
    one row an execution, with the launch that replayed it."""
    graphs = source.scalar("SELECT count(*) FROM events WHERE kind = 'graph'")
    return (*DEFAULT_KINDS, "graph") if graphs else DEFAULT_KINDS


# What per_launch() and summary() read: load(path, columns=INPUT_COLUMNS, kinds=input_kinds(...)).
INPUT_COLUMNS = (
    *("trace_id", "event_id", "source", "kind", "name", "start_ns", "dur_ns", "pid", "device", "context"),
    *("stream", "correlation_id", "launch_event_id", "launch_name", "launch_start_ns", "launch_end_ns"),
    *("launch_tid", "queue_ns", "wall_ns", "op_name"),
)


def input_kinds(kinds: Sequence[str] = DEFAULT_KINDS) -> list[str]:
    """The row kinds to load for ``kinds`` of GPU work: those and the API calls that launch them."""
    return [*kinds, "cuda_api"]


def _launches_sql(kinds: Sequence[str], ordered: bool = True, pid: bool = True) -> str:
    """:data:`PER_LAUNCH` columns per GPU row of ``kinds`` (a query over ``events``), in launch order
    (``ordered``; a group-by needs no order, and only a grouping by ``pid`` the launching call's pid).

    ``pid`` is the launching call's (a PyTorch trace gives GPU rows the device as pid, so the
    launching row's pid is looked up by ``launch_event_id``; other sources fall back on the row's
    own pid).
    """
    wanted = literals(kinds)
    api = "SELECT coalesce(trace_id, '') AS trace_id, event_id, pid FROM events WHERE kind = 'cuda_api'"
    if not pid:
        api += " AND false"
    order = (
        " ORDER BY coalesce(g.launch_start_ns, g.start_ns) NULLS LAST, g.start_ns NULLS LAST, g.trace_id, g.event_id"
        if ordered
        else ""
    )
    return (
        f"WITH api AS ({api}) "
        "SELECT g.launch_start_ns AS api_start_ns, g.launch_end_ns - g.launch_start_ns AS api_dur_ns, "
        "CASE WHEN g.queue_ns IS NOT NULL THEN g.launch_end_ns END AS queue_start_ns, g.queue_ns AS queue_dur_ns, "
        "g.start_ns AS kernel_start_ns, g.dur_ns AS kernel_dur_ns, g.wall_ns AS total_dur_ns, "
        "coalesce(a.pid, CASE WHEN g.source <> 'pytorch' THEN g.pid END) AS pid, g.launch_tid AS tid, "
        "CAST(g.device AS BIGINT) AS device, g.context, g.stream, g.launch_name, g.name, g.kind, g.correlation_id, "
        "g.trace_id, g.op_name FROM events g "
        "LEFT JOIN api a ON a.trace_id = coalesce(g.trace_id, '') AND a.event_id = g.launch_event_id "
        f"WHERE g.kind IN ({wanted}){order}"
    )


def per_launch(data: Data | Source, kinds: Sequence[str] = DEFAULT_KINDS) -> pd.DataFrame:
    """One row per GPU operation of ``kinds``, like ``cuda_kern_exec_trace``, in launch order.

    Rows with no launching call are kept with null API, queue and total times and are ordered
    by their own start.
    """
    return _per_launch(_source(data), kinds)


def _per_launch(source: Source, kinds: Sequence[str], limit: int = 0) -> pd.DataFrame:
    sql = _launches_sql(kinds)
    if limit:  # the longest, longest first
        sql = f"SELECT * FROM ({sql}) ORDER BY kernel_dur_ns DESC NULLS LAST LIMIT {int(limit)}"
    out: pd.DataFrame = source.frame(sql)
    text = ("launch_name", "name", "kind", "trace_id", "op_name")
    for col in text:
        out[col] = out[col].astype("category")
    return out


def summary(
    data: Data | Source, by: str | Sequence[str] = "name", kinds: Sequence[str] = DEFAULT_KINDS
) -> pd.DataFrame:
    """Per group: count and total/avg/median/min/max/stddev of execution, queue, API and wall time.

    ``by``: ``"name"`` (the kernel, as ``cuda_gpu_kern_sum``), ``"launch"`` (the launching
    API call), ``"op"`` (the operator or NVTX range), ``"exec"`` (process, thread, device, API
    and kernel, as ``cuda_kern_exec_sum``) or a sequence of :data:`PER_LAUNCH` columns. ``data``
    is a unified table, a :class:`Source`, or a :func:`per_launch` result.

    Columns: the keys; ``count``; ``no_launch`` (rows with no launching call in the trace:
    counted in ``exec_*``, absent from ``api_*`` and ``wall_*``); ``queued`` (rows with a
    queue time, NVIDIA's QCount); ``time_pct`` (share of the summed execution time of all
    groups); then ``{exec,queue,api,wall}_{total,avg,med,min,max,std}_ns`` (NVIDIA's
    definitions: the median of an even count is the midpoint of the two middle values; the
    standard deviation is the sample one, 0 for a single value). Sorted as NVIDIA sorts: total
    execution time descending, then count, then keys.
    """
    keys = list(GROUPINGS[by]) if isinstance(by, str) and by in GROUPINGS else _keys(by)
    if _is_per_launch(data):
        assert isinstance(data, pd.DataFrame)
        source = Source(pa.Table.from_pandas(data[list(PER_LAUNCH)], preserve_index=False))
        launches = "SELECT * FROM events"
    else:
        source, launches = _source(data), _launches_sql(kinds, ordered=False, pid="pid" in keys)
    return _summary(source, launches, keys)


def _summary(source: Source, launches: str, keys: list[str]) -> pd.DataFrame:
    group = ", ".join(f'"{k}"' for k in keys)
    measures = []
    for prefix, col in MEASURES.items():
        measures += [
            f"isum({col}) AS {prefix}_total_ns",
            f"avg({col}) AS {prefix}_avg_ns",
            f"CAST(quantile_cont({col}, 0.5) AS DOUBLE) AS {prefix}_med_ns",
            f"min({col}) AS {prefix}_min_ns",
            f"max({col}) AS {prefix}_max_ns",
            f"CASE WHEN count({col}) = 1 THEN 0.0 ELSE stddev_samp({col}) END AS {prefix}_std_ns",
        ]
    out = source.frame(
        f"SELECT {group}, count(*) AS count, count(*) - count(api_start_ns) AS no_launch, "
        f"count(queue_dur_ns) AS queued, {', '.join(measures)} FROM ({launches}) GROUP BY {group}"
    )
    grand = int(out["exec_total_ns"].fillna(0).sum())
    share = out["exec_total_ns"].fillna(0).astype("float64") * 100.0 / grand if grand else 0.0
    out.insert(len(keys) + 3, "time_pct", share)
    for key in keys:
        if not pd.api.types.is_numeric_dtype(out[key]):
            out[key] = out[key].astype("category")
    out = out.sort_values(
        ["exec_total_ns", "count", *keys],
        ascending=[False, True, *[True] * len(keys)],
        kind="stable",
        na_position="last",
        key=_sortable,
    )
    result: pd.DataFrame = out.reset_index(drop=True)
    return result


def _source(data: Data | Source) -> Source:
    if isinstance(data, Source):
        return data
    table = data if isinstance(data, pa.Table) else pa.Table.from_pandas(data, preserve_index=False)
    return Source(table)


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


def report(
    data: Data | Source, kinds: Sequence[str] = DEFAULT_KINDS, by: str | None = "name", limit: int = 0
) -> KernelReport:
    """Per launch (``by=None``, the ``limit`` longest) or per group (the ``limit`` with most execution time)."""
    source = _source(data)
    if by is None:
        rows = _per_launch(source, kinds, limit)
        sums = source.arrow(
            f"SELECT count(*) AS n, count(*) - count(api_start_ns) AS no_launch, count(queue_dur_ns) AS queued, "
            f"total(kernel_dur_ns) AS exec FROM ({_launches_sql(kinds, ordered=False, pid=False)})"
        ).to_pylist()[0]
        figures = LaunchTotals(int(sums["n"]), int(sums["no_launch"]), int(sums["queued"]), int(sums["exec"]))
        return KernelReport(rows, figures, tuple(kinds), None, ())
    keys = GROUPINGS[by] if by in GROUPINGS else tuple(_keys(by))
    result = _summary(source, _launches_sql(kinds, ordered=False, pid="pid" in keys), list(keys))
    if keys == ("name",):
        result = with_fused(with_sm_activity(source, result))
    return KernelReport(result.head(limit) if limit else result, totals(result), tuple(kinds), by, keys)


ROOF_COLUMNS = ("engine", "dtype", "flops", "tflops", "bound", "pct_of_roof")


def with_roofline(r: KernelReport, roofs: Sequence[KernelRoof]) -> KernelReport:
    """A per-name report with each name's engine (``tensor`` or ``cuda`` cores for matrix work, empty for
    other kernels), the FLOPs of its operators' work that fell to it, the TFLOP/s that achieved and its
    place on the roofline (:func:`traceconv.analyses.roofline.kernel_roofs`)."""
    at = {k.name: k for k in roofs}
    names = r.rows["name"].astype("string")
    rows: pd.DataFrame = r.rows.copy()
    for col in ROOF_COLUMNS:
        values = [getattr(at[n], col) if n in at else None for n in names.fillna("")]
        rows[col] = pd.array(
            values, dtype="Int64" if col == "flops" else "Float64" if col in ("tflops", "pct_of_roof") else object
        )
    return dataclasses.replace(r, rows=rows)


def with_sm_activity(source: Source, table: pd.DataFrame) -> pd.DataFrame:
    """A per-name summary with the GPU metrics inside each name's executions (``sm_active_pct``,
    ``warps_in_flight_pct``, ``metric_samples``), where the input has GPU metrics."""
    if not U.has_metrics(source):
        return table
    per = U.per_kernel(source).rename(columns={"samples": "metric_samples"})
    names = table["name"].astype("string")
    out: pd.DataFrame = table.copy()
    at = per.set_index("name")
    for col in U.PER_NAME:
        out[col] = names.map(at[col]).astype("float64").to_numpy()
    out["metric_samples"] = names.map(at["metric_samples"]).fillna(0).astype("int64").to_numpy()
    return out


def with_fused(table: pd.DataFrame) -> pd.DataFrame:
    """A per-name summary with ``fuses``: the aten operations an Inductor kernel's name says it fuses
    (comma-separated, :func:`traceconv.analyses.compiled.names.fused_ops`), where any kernel is one."""
    ops = table["name"].astype("string").map(lambda n: ", ".join(fused_ops(str(n))) if isinstance(n, str) else "")
    if not ops.astype(bool).any():
        return table
    out: pd.DataFrame = table.assign(fuses=ops.where(ops.astype(bool), None).astype("string"))
    return out


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
