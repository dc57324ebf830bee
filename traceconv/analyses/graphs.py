"""CUDA graphs replayed in a profile: per graph, its launches, its work per replay, its longest
nodes, and the operators that captured its kernels.

A replay is the GPU work one ``cudaGraphLaunch`` (``cuGraphLaunch``) launched: its kernels, copies
and memsets (Kineto; Nsight Systems with ``--cuda-graph-trace=node``), or one ``graph`` row
(Nsight Systems' default, graphs traced whole: their nodes are not known). Replays of one graph
are told apart by their graph id (Nsight Systems' whole graphs) or by the sequence of their rows'
names (a graph replays the same nodes each time).

The operators that captured the kernels: a replayed kernel carries no operator of its own (its
launch is the ``cudaGraphLaunch``, inside whatever operator or range replays the graph). When the
capture is in the profile, its launch calls are there: calls that launch GPU work (kernel launches,
copies, memsets) with no GPU row of their own, made one after another on a thread before the
``cudaGraphInstantiate`` that made the graph. A graph whose replays have as many rows as such a
capture has launches is that capture's: its replay's ``i``-th row (in start order) is the
``i``-th captured launch, whose operator is the one that captured it (one stream replays in
capture order; a capture whose count matches no graph's is left unmatched, and its replays keep
the operator around their launch).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from traceconv.analyses.source import Source

GRAPH_LAUNCH = "%GraphLaunch%"
LAUNCHES = ("LaunchKernel", "Memcpy", "Memset", "LaunchCooperativeKernel")  # calls that launch GPU work
LONGEST = 5
TOP_OPS = 8


@dataclass(frozen=True)
class Node:
    """A node of a graph: its name and its GPU time per replay (median)."""

    name: str
    ns_per_replay: int


@dataclass(frozen=True)
class CapturedOp:
    """An operator that captured kernels of a graph: how many, and their GPU time per replay."""

    name: str
    kernels: int
    ns_per_replay: int


@dataclass(frozen=True)
class GraphStats:
    name: str
    launches: int
    rows_per_replay: int | None  # None: traced whole (no nodes known)
    gpu_ns_per_replay: int  # the replay's GPU busy time (whole: the graph row's duration), median
    span_ns_per_replay: int  # from its first row's start to its last row's end, median
    gpu_ns: int  # all replays
    launched_from: str | None  # the operator or range around its launches (the most common)
    captured: bool  # its capture is in the profile and its nodes are matched to its launches
    longest: list[Node] = field(default_factory=list)
    captured_by: list[CapturedOp] = field(default_factory=list)


@dataclass(frozen=True)
class Graphs:
    graphs: list[GraphStats]
    whole: bool  # some graphs were traced whole (their nodes unknown)
    replayed_gpu_ns: int  # GPU time of every replay
    attributed_gpu_ns: int  # of it, on rows matched to the operator that captured them


def graphs(source: Source) -> Graphs | None:
    """The graphs replayed in ``source`` (``None`` when none was)."""
    graph_id = "graph_id" if source.has("graph_id") else "NULL::BIGINT AS graph_id"
    rows = source.frame(
        "SELECT CAST(kind AS VARCHAR) AS kind, CAST(name AS VARCHAR) AS name, start_ns, end_ns, launch_event_id, "
        f"{graph_id}, CAST(op_name AS VARCHAR) AS op_name, coalesce(CAST(trace_id AS VARCHAR), '') AS trace_id "
        "FROM events WHERE kind IN ('kernel', 'memcpy', 'memset', 'graph') AND launch_name LIKE ? "
        "AND launch_event_id IS NOT NULL AND start_ns IS NOT NULL",
        [GRAPH_LAUNCH],
    )
    if rows.empty:
        return None
    rows = rows.sort_values(["trace_id", "launch_event_id", "start_ns"], kind="stable").reset_index(drop=True)
    captures = _captures(source)
    out: list[GraphStats] = []
    attributed = 0
    groups = list(_by_graph(rows))
    for k, (key, replays) in enumerate(groups):
        stats, matched = _stats(key, k + 1, replays, captures)
        out.append(stats)
        attributed += matched
    out.sort(key=lambda g: -g.gpu_ns)
    replayed = int((rows["end_ns"] - rows["start_ns"]).sum())
    return Graphs(out, bool((rows["kind"] == "graph").any()), replayed, attributed)


def _by_graph(rows: pd.DataFrame) -> list[tuple[str, list[pd.DataFrame]]]:
    """The replays of each graph, in the order of their first launch."""
    found: dict[str, list[pd.DataFrame]] = {}
    for (_, _), replay in rows.groupby(["trace_id", "launch_event_id"], sort=False):
        whole = replay[replay["kind"] == "graph"]
        if len(whole):
            gid = whole["graph_id"].iloc[0]
            key = str(whole["name"].iloc[0]) if pd.isna(gid) else f"CUDA graph {int(gid)}"
        else:
            key = "\x00".join(replay["name"].tolist())
        found.setdefault(key, []).append(replay)
    return list(found.items())


@dataclass(frozen=True)
class _Capture:
    """A capture in the profile: its launch calls' operators, in order, and the time it ended."""

    trace_id: str
    ops: list[str | None]
    end_ns: int


def _captures(source: Source) -> list[_Capture]:
    """Runs of launch calls with no GPU work of their own before each graph instantiation."""
    like = " OR ".join(f"name LIKE '%{n}%'" for n in LAUNCHES)
    calls = source.frame(
        "WITH launched AS (SELECT DISTINCT launch_event_id AS id, coalesce(CAST(trace_id AS VARCHAR), '') AS t "
        "FROM events WHERE launch_event_id IS NOT NULL) "
        "SELECT coalesce(CAST(e.trace_id AS VARCHAR), '') AS trace_id, e.tid, e.start_ns, CAST(e.name AS VARCHAR) "
        "AS name, CAST(e.op_name AS VARCHAR) AS op_name, l.id IS NOT NULL AS ran "
        f"FROM events e LEFT JOIN launched l ON l.id = e.event_id AND l.t = coalesce(CAST(e.trace_id AS VARCHAR), '') "
        f"WHERE e.kind = 'cuda_api' AND (({like}) OR e.name LIKE '%GraphInstantiate%') ORDER BY 1, 2, 3"
    )
    out: list[_Capture] = []
    for (trace, _), thread in calls.groupby(["trace_id", "tid"], sort=False):
        run: list[str | None] = []
        for name, op, ran, start in zip(
            thread["name"], thread["op_name"], thread["ran"], thread["start_ns"], strict=True
        ):
            if "GraphInstantiate" in name:
                if run:
                    out.append(_Capture(str(trace), run, int(start)))
                run = []
            elif ran:
                run = []
            else:
                run.append(None if pd.isna(op) else str(op))
    return out


def _stats(key: str, number: int, replays: list[pd.DataFrame], captures: list[_Capture]) -> tuple[GraphStats, int]:
    first = replays[0]
    whole = bool((first["kind"] == "graph").all())
    busy = np.array([int((r["end_ns"] - r["start_ns"]).sum()) for r in replays], np.int64)
    span = np.array([int(r["end_ns"].max() - r["start_ns"].min()) for r in replays], np.int64)
    around = Counter(str(op) for r in replays for op in r["op_name"].head(1) if not pd.isna(op))
    name = key if whole else f"graph {number}"
    n = len(first)
    longest: list[Node] = []
    captured_by: list[CapturedOp] = []
    matched = 0
    if not whole:
        same = [r for r in replays if len(r) == n]
        durations = np.stack([(r["end_ns"] - r["start_ns"]).to_numpy(np.int64) for r in same])
        per_node = np.median(durations, axis=0)
        names = first["name"].tolist()
        for i in np.argsort(-per_node, kind="stable")[:LONGEST]:
            longest.append(Node(str(names[i]), round(float(per_node[i]))))
        capture = _capture_of(first, n, captures)
        if capture is not None:
            ops = np.array([op or "(no operator)" for op in capture.ops], dtype=object)
            captured_by = sorted(
                (
                    CapturedOp(
                        str(op), int((ops == op).sum()), round(float(np.median(durations[:, ops == op].sum(axis=1))))
                    )
                    for op in dict.fromkeys(ops.tolist())
                    for mine in [ops == op]
                ),
                key=lambda c: -c.ns_per_replay,
            )[:TOP_OPS]
            matched = int(durations.sum())
    stats = GraphStats(
        name=name,
        launches=len(replays),
        rows_per_replay=None if whole else n,
        gpu_ns_per_replay=round(float(np.median(busy))),
        span_ns_per_replay=round(float(np.median(span))),
        gpu_ns=int(busy.sum()),
        launched_from=around.most_common(1)[0][0] if around else None,
        captured=bool(captured_by),
        longest=longest,
        captured_by=captured_by,
    )
    return stats, matched


def _capture_of(first: pd.DataFrame, n: int, captures: list[_Capture]) -> _Capture | None:
    """The capture of a graph: of the same trace, as many launches as its replays have rows, the
    last to end before its first replay."""
    trace, start = str(first["trace_id"].iloc[0]), int(first["start_ns"].min())
    fits = [c for c in captures if c.trace_id == trace and len(c.ops) == n and c.end_ns <= start]
    return max(fits, key=lambda c: c.end_ns) if fits else None
