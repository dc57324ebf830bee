"""What every scope of an analysis needs to know about an input first: its window, its steps,
the names its ranges are grouped by, and the program it comes from (:class:`Facts`).

Host ranges are CPU operators, host-side annotations and NVTX ranges (an NVTX row with a device
is a GPU-side projection, not a range of the host), and CUDA API calls, with a start; a range
that never ended runs to the last end of any. Names are grouped (:func:`labels`): every step as
one name (``ProfilerStep#*``), and ``emit_nvtx``'s per-call suffixes dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from traceconv.analyses import intervals as I
from traceconv.analyses.source import Source, literal, one_of
from traceconv.analyses.steps import STEP_PATTERN, HostSteps, Launched, Steps, host_steps, lived, step_label, step_regex
from traceconv.analyses.vocabulary import (
    GPU_KINDS,
    GPU_NAMES,
    GPU_WORK,
    GPU_WORK_KINDS,
    GRAPH_LAUNCH,
    gpu_names,
)

RANGE_KINDS = ("cpu_op", "nvtx", "cuda_api")
OP_KINDS = ("cpu_op", "nvtx")
NO_OP = "(no operator)"
LAUNCH_GAP_NS = 200_000  # a gap the host leaves between CUDA calls shorter than this is launch overhead
_EMIT_NVTX = re.compile(r", (seq|op_id|sizes|input_op_ids) = .*$", re.DOTALL)
_PYTORCH = re.compile(r"^(aten::|ProfilerStep#|autograd::|torch\.)|at::native::|at::cuda::|\bc10::")

# What the analyses read of the unified schema: load(path, columns=INPUT_COLUMNS).
INPUT_COLUMNS = (
    *("source", "trace_id", "rank", "event_id", "kind", "name", "short_name", "start_ns", "end_ns", "dur_ns"),
    *("pid", "tid", "device", "stream", "correlation_id", "launch_event_id", "launch_name", "launch_start_ns"),
    "launch_end_ns",
    *("queue_ns", "op_event_id", "op_name", "occupancy_pct", "bytes", "copy_kind", "src_kind", "dst_kind"),
    *("sync_type", "total_allocated_bytes", "total_reserved_bytes", "args", "category"),
    *("est_occupancy_pct", "theoretical_occupancy_pct", "occupancy_limiter", "value", "unit", "graph_id"),
)
# The host ranges, as a query over ``events``.
HOST_RANGES = (
    "SELECT coalesce(trace_id, '') AS trace_id, event_id, kind, name, start_ns, end_ns, dur_ns, "
    "coalesce(pid, -1) AS pid, coalesce(tid, -1) AS tid, op_name, correlation_id FROM events "
    "WHERE kind IN ('cpu_op', 'nvtx', 'cuda_api') AND start_ns IS NOT NULL AND (device IS NULL OR kind <> 'nvtx')"
)
# A host range's thread (trace, process, thread) as one integer, over HOST_RANGES' columns.
HOST_THREAD = "CAST(hash(trace_id, pid, tid) >> 1 AS BIGINT)"


@dataclass(frozen=True)
class Program:
    """What a trace says about the program that made it (the findings' advice is phrased for it)."""

    framework: str  # "pytorch", or "cuda" for anything else
    cuda_graphs: bool  # it launches CUDA graphs already


@dataclass(frozen=True)
class Facts:
    source: str  # "pytorch", "nsys", or both joined by "+"
    window: tuple[int, int]
    steps: Steps | None
    program: Program
    labels: pd.DataFrame  # name -> id, label, is_step (registered as the table ``labels``)
    label_names: list[str]  # label id -> label
    last_end: int  # the last end of any host range: where a range that never ended ends
    last_anchor: int | None  # the latest launch (or start) of any GPU row
    gpu_spans: dict[str, tuple[int, int]]  # per device: its first GPU work's start, its last one's end


def prepare(data: pa.Table | Source, step_pattern: str = STEP_PATTERN) -> Facts:
    """What every analysis of an input needs first (its labels are registered on the Source)."""
    source = as_source(data)
    step_re = step_regex(step_pattern)
    names, label_names = labels(source, step_re)
    source.register("labels", names)
    host = host_span(source)
    last_end = host["last"]
    gpu, spans = _gpu_extents(source)
    last_anchor = gpu["anchor"]
    sources = _source(source)
    return Facts(
        source=sources,
        window=_window(host, gpu),
        steps=find(source, _step_ranges(source, last_end)),
        program=_program(source, sources),
        labels=names,
        label_names=label_names,
        last_end=int(last_end) if last_end is not None else 0,
        last_anchor=int(last_anchor) if last_anchor is not None else None,
        gpu_spans=spans,
    )


def host_names(source: Source) -> list[tuple[str, str | None]]:
    """Each distinct (kind, name) of the host ranges (for the labels, the program and the CUDA calls
    of the syncs)."""
    return [(r["kind"], r["name"]) for r in _host_groups(source)]


def host_extents(source: Source) -> dict[bool, dict[str, Any]]:
    """The host ranges' extents (:func:`_extent`), the CUDA calls' (True) apart from the others'
    (False), for the calls' pass; a class without ranges is left out."""
    out: dict[bool, dict[str, Any]] = {}
    for calls in (True, False):
        rows = [r for r in _host_groups(source) if (r["kind"] == "cuda_api") == calls]
        if rows:
            out[calls] = _extent(rows)
    return out


def host_span(source: Source) -> dict[str, Any]:
    """The extent (:func:`_extent`) of every host range together (the window, the calls' pass)."""
    return _extent(_host_groups(source))


def _extent(groups: list[dict[str, Any]]) -> dict[str, Any]:
    """Of groups of :func:`_host_groups`: ``n`` ranges, their ``first_id`` and ``last_id``, ``first``
    start, ``last_start`` and ``last`` end (None where no group has one)."""
    picks = (("first_id", min), ("last_id", max), ("first", min), ("last_start", max), ("last", max))
    return {"n": sum(g["n"] for g in groups)} | {
        k: pick((v for g in groups if (v := g[k]) is not None), default=None) for k, pick in picks
    }


def _host_groups(source: Source) -> list[dict[str, Any]]:
    """The host ranges per (kind, name) with their extents, read once per Source."""

    def read() -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = source.arrow(
            "SELECT kind, name, count(*) AS n, min(event_id) AS first_id, max(event_id) AS last_id, "
            f"min(start_ns) AS first, max(start_ns) AS last_start, max(end_ns) AS last FROM ({HOST_RANGES}) "
            "GROUP BY ALL"
        ).to_pylist()
        return rows

    groups: list[dict[str, Any]] = source.kept("host_groups", read)
    return groups


def op_label(name: str) -> str:
    """The name an operator or range is grouped by: ``emit_nvtx``'s per-call suffixes (``, seq = 5, op_id =
    9, sizes = [...]``) dropped."""
    return _EMIT_NVTX.sub("", name)


def labels(source: Source, step_re: re.Pattern[str]) -> tuple[pd.DataFrame, list[str]]:
    """Every name of a host range or an ``op_name``, with the name it is grouped by."""
    names = sorted({n for _, n in host_names(source) if n is not None} | set(op_names(source)))
    grouped = [op_label(n) for n in names]
    grouped = [step_label(g) if step_re.search(g) else g for g in grouped]
    steps = [bool(step_re.search(n)) for n in names]  # a step by its own name
    distinct = sorted(set(grouped))
    at = {g: i for i, g in enumerate(distinct)}
    frame = pd.DataFrame(
        {
            "name": pd.Series(names, dtype=object),
            "id": np.array([at[g] for g in grouped], dtype=np.int64),
            "label": pd.Series(grouped, dtype=object),
            "is_step": np.array(steps, dtype=bool),
        }
    )
    return frame, distinct


def op_names(source: Source) -> list[str]:
    """Every distinct ``op_name`` (the operators GPU rows and CUDA calls came from), read once per Source."""

    def read() -> list[str]:
        got = source.arrow("SELECT DISTINCT op_name FROM events WHERE op_name IS NOT NULL")["op_name"].to_pylist()
        return [str(n) for n in got]

    names: list[str] = source.kept("op_names", read)
    return names


def _step_ranges(source: Source, last_end: int | None) -> pd.DataFrame:
    """The step ranges (``find_steps`` picks one thread's), with their grouped name."""
    steps: pd.DataFrame = source.frame(
        f"SELECT r.name, l.label, r.start_ns, coalesce(r.end_ns, ?) AS end_ns, r.trace_id, r.pid, r.tid "
        f"FROM ({HOST_RANGES}) r "
        "JOIN labels l ON l.name = r.name WHERE l.is_step AND r.kind IN ('cpu_op', 'nvtx') "
        "ORDER BY r.trace_id, r.event_id",
        [last_end],
    ).assign(is_step=True)
    return steps


STEP_BUCKETS = 4  # time buckets a step, on average, for the join of the GPU rows on the steps
# A GPU row's device as the analyses name it.
DEVICE = "coalesce(CAST(device AS VARCHAR), 'unknown')"


def _gpu_extents(source: Source) -> tuple[dict[str, Any], dict[str, tuple[int, int]]]:
    """The first start and last end of the GPU and sync rows and the latest anchor of the GPU rows (the
    launch's start, else the row's own; graphs traced whole aside); and per device, from the start of
    its first GPU work to the end of its last (where its busy and idle time are measured without
    steps). One read of the GPU rows per kind, name, launch call and device, which also gives
    :func:`gpu_names` its names."""
    done = "start_ns IS NOT NULL AND end_ns IS NOT NULL"
    launch = "launch_name" if source.has("launch_name") else "NULL"
    groups = source.arrow(
        f"SELECT CAST(kind AS VARCHAR) AS kind, CAST(name AS VARCHAR) AS name, CAST({launch} AS VARCHAR) AS launch, "
        f"{DEVICE} AS dev, min(start_ns) AS first, max(end_ns) AS last, "
        f"max(coalesce(launch_start_ns, start_ns)) AS anchor, min(start_ns) FILTER (WHERE {done}) AS s, "
        f"max(end_ns) FILTER (WHERE {done}) AS e FROM events WHERE kind IN {(*GPU_WORK_KINDS, 'sync')} GROUP BY ALL"
    ).to_pylist()
    work = [g for g in groups if g["kind"] != "sync"]
    source.kept(GPU_NAMES, lambda: sorted({(str(g["kind"]), g["name"], g["launch"]) for g in work}, key=str))
    rows = [g for g in groups if g["kind"] != "graph"]  # the GPU and sync rows
    extents = {
        "first": min((v for g in rows if (v := g["first"]) is not None), default=None),
        "last": max((v for g in rows if (v := g["last"]) is not None), default=None),
        "anchor": max((v for g in rows if g["kind"] != "sync" and (v := g["anchor"]) is not None), default=None),
    }
    spans: dict[str, tuple[int, int]] = {}
    for g in work:
        if g["s"] is not None:
            s, e = spans.get(str(g["dev"]), (g["s"], g["e"]))
            spans[str(g["dev"])] = (int(min(s, g["s"])), int(max(e, g["e"])))
    return extents, spans


def find(source: Source, ranges: pd.DataFrame) -> Steps | None:
    """The steps among ``ranges`` (:func:`~traceconv.analyses.steps.host_steps`), as the program
    lived them with the GPU work they launched."""
    host = host_steps(ranges)
    return lived(host, launched(source, host), one_offs(source)) if host is not None else None


ONE_OFF_CALLS = ("StreamBeginCapture", "GraphInstantiate")  # a CUDA graph captured


def one_offs(source: Source) -> I.I64:
    """When the program did what it does once (:func:`~traceconv.analyses.steps.lived`): a CUDA
    graph's capture began or a graph was instantiated, Dynamo compiled (its compile ranges). Tested
    against the few distinct host range names, read once."""
    from traceconv.analyses.compiled.compiles import compiling

    names = [
        n
        for k, n in host_names(source)
        if n and (compiling(n) if k != "cuda_api" else any(c in n for c in ONE_OFF_CALLS))
    ]
    if not names:
        return np.zeros(0, np.int64)
    rows = source.arrow(f"SELECT start_ns FROM events WHERE {one_of('name', names)} AND start_ns IS NOT NULL")
    return np.asarray(rows.column(0).to_numpy(zero_copy_only=False), np.int64)


def launched(source: Source, host: HostSteps) -> Launched:
    """The GPU work each host step range launched (by the start of its launching call, its own start
    where that is not in the trace) in the steps' process, and the last end of what was launched before.

    The steps are found by a hash join on time buckets (each step a row per bucket it touches, about
    four buckets a step), not a join that sorts millions of GPU rows."""
    lo, hi = int(host.start_ns[0]), int(max(int(host.end_ns.max()), int(host.start_ns[-1]) + 1))
    width = max(1, (hi - lo) // (STEP_BUCKETS * host.count))
    first_b, last_b = host.start_ns // width, np.maximum(host.end_ns - 1, host.start_ns) // width
    n = (last_b - first_b + 1).astype(np.int64)
    k = np.repeat(np.arange(host.count, dtype=np.int64), n)
    bucket = np.repeat(first_b, n) + (np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n))
    source.register("step_buckets", pa.table({"bucket": bucket, "k": k, "s": host.start_ns[k], "e": host.end_ns[k]}))
    rows = source.arrow(
        "WITH g AS (SELECT coalesce(launch_start_ns, start_ns) AS t, start_ns, end_ns FROM events "
        f"WHERE {GPU_WORK} AND start_ns IS NOT NULL AND end_ns IS NOT NULL{_process_of(source, host)}) "
        "SELECT h.k, min(g.start_ns) AS first, max(g.end_ns) AS last, "
        f"max(g.end_ns) FILTER (WHERE g.t < {lo}) AS before FROM g LEFT JOIN step_buckets h "
        f"ON h.bucket = g.t // {width} AND g.t >= h.s AND g.t < h.e GROUP BY ALL"
    ).to_pylist()
    first = np.zeros(host.count, np.int64)
    last = np.zeros(host.count, np.int64)
    has = np.zeros(host.count, np.bool_)
    before = None
    for r in rows:
        if r["k"] is None:
            before = int(r["before"]) if r["before"] is not None else None
        else:
            first[r["k"]], last[r["k"]], has[r["k"]] = r["first"], r["last"], True
    return Launched(first, last, has, before)


def _process_of(source: Source, host: HostSteps) -> str:
    """The condition that a GPU row was launched by the steps' process: in their trace; and, where the
    trace has several host processes, its own process (Nsight Systems) or its launching call's (PyTorch)."""
    if host.trace_id is None:
        return ""
    trace = f"coalesce(trace_id, '') = {literal(host.trace_id)}"
    pids = source.scalar(f"SELECT count(DISTINCT pid) FROM events WHERE kind = 'cuda_api' AND {trace}")
    if host.pid is None or not pids or int(pids) <= 1:
        return f" AND {trace}"
    calls = f"SELECT event_id FROM events WHERE kind = 'cuda_api' AND {trace} AND pid = {int(host.pid)}"
    return (
        f" AND {trace} AND CASE WHEN source = 'nsys' THEN pid = {int(host.pid)} ELSE launch_event_id IN ({calls}) END"
    )


def _source(source: Source) -> str:
    values = [v for v in source.formats() if v is not None]
    return "+".join(sorted(str(v) for v in values)) or "unknown"


def _window(host: dict[str, Any], gpu: dict[str, Any]) -> tuple[int, int]:
    """From the first start to the last end of the GPU rows, host ranges and sync rows (``host``: the
    host ranges' first start and last end; ``gpu``: the GPU and sync rows'). A host range that never
    ended ends at the last end of any: it moves no edge."""
    starts = [int(v) for v in (host["first"], gpu["first"]) if v is not None]
    ends = [int(v) for v in (host["last"], gpu["last"]) if v is not None]
    return (min(starts), max(ends)) if starts and ends else (0, 0)


def _program(source: Source, sources: str) -> Program:
    """PyTorch or another CUDA program, and whether it already replays CUDA graphs (``sources``: the
    input's, as :func:`_source` says)."""
    hosts = host_names(source)
    names = [n for _, n in hosts] + [n for k, n, _ in gpu_names(source) if k in GPU_KINDS]
    api = [n for k, n in hosts if k == "cuda_api"]
    torch = "pytorch" in sources or any(_PYTORCH.search(str(n)) for n in names if n is not None)
    return Program("pytorch" if torch else "cuda", cuda_graphs=any(GRAPH_LAUNCH.match(str(n)) for n in api if n))


def as_source(data: pa.Table | Source) -> Source:
    """An analysis input as a Source: an Arrow table (``load``, ``traceconv.read``) is queried in place."""
    return data if isinstance(data, Source) else Source(data)


_STEP_LIKE = re.compile(r"^(.*?)(\d+)$")
_STEP_WORD = re.compile(r"step|iter|batch", re.IGNORECASE)  # what a step range's stem says of itself
MIN_STEP_LIKE = 3  # ranges of one stem and a number before they look like steps


def step_hint(source: Source) -> str:
    """How to mark steps, or the --steps pattern that matches ranges that look like steps already
    (a stem that says step, iteration or batch and a number, at least :data:`MIN_STEP_LIKE` of them:
    ``rank0_step3``)."""
    names = source.arrow(
        "SELECT name, count(*) AS n FROM events WHERE kind IN ('cpu_op', 'nvtx') AND name IS NOT NULL "
        "AND regexp_matches(name, '\\d+$') GROUP BY ALL"
    ).to_pylist()
    stems: dict[str, int] = {}
    for r in names:
        m = _STEP_LIKE.match(str(r["name"]))
        if m and _STEP_WORD.search(m.group(1)):
            stem = re.sub(r"\d+", r"\\d+", re.escape(m.group(1)))
            stems[stem] = stems.get(stem, 0) + 1
    likely = [s for s, n in sorted(stems.items(), key=lambda kv: -kv[1]) if n >= MIN_STEP_LIKE]
    if likely:
        return f"ranges that look like steps are there: --steps '^{likely[0]}\\d+$'"
    return "prof.step(), or an NVTX range step_N per step; --steps REGEX names other ranges"
