"""CUDA graphs replayed in a profile: per graph, its launches, its work per replay, its longest
nodes, and the operators that captured its kernels.

A replay is the GPU work one ``cudaGraphLaunch`` (``cuGraphLaunch``) launched: its kernels, copies
and memsets (Kineto; Nsight Systems with ``--cuda-graph-trace=node``), or one ``graph`` row
(Nsight Systems' default, graphs traced whole: their nodes are not known). Replays of one graph
are told apart by their graph id (Nsight Systems' whole graphs) or by the sequence of their rows'
names (a graph replays the same nodes each time).

The operators that captured the kernels: a replayed kernel's launch is the ``cudaGraphLaunch``,
inside whatever operator or range replays the graph. When the capture is in the profile, the
reader gave each replayed row the operator of the launch call that captured it
(:mod:`traceconv.readers.graph_capture`): a row whose operator is not its launch call's is one
matched to its capture. Rows of a replay that no capture fits keep the operator around their launch.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pandas as pd

from traceconv.analyses.source import Source
from traceconv.analyses.vocabulary import graph_launched

# A replayed row matched to its capture: its operator is not its launch call's (g: the row, l: the call).
CAPTURED = "coalesce(g.op_event_id IS DISTINCT FROM l.op_event_id AND l.event_id IS NOT NULL, false)"
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
    launched = graph_launched(source)
    if launched == "false":  # no graph launch among the launch calls
        return None
    graph_id = "graph_id" if source.has("graph_id") else "NULL::BIGINT AS graph_id"
    rows = source.frame(
        "WITH g AS (SELECT kind, name, start_ns, end_ns, launch_event_id, "
        f"{graph_id}, op_event_id, op_name, coalesce(CAST(trace_id AS VARCHAR), '') AS trace_id "
        f"FROM events WHERE kind IN ('kernel', 'memcpy', 'memset', 'graph') AND {launched} "
        "AND launch_event_id IS NOT NULL AND start_ns IS NOT NULL) "
        "SELECT CAST(g.kind AS VARCHAR) AS kind, CAST(g.name AS VARCHAR) AS name, g.start_ns, g.end_ns, "
        "g.launch_event_id, g.graph_id, CAST(g.op_name AS VARCHAR) AS op_name, g.trace_id, "
        f"CAST(l.op_name AS VARCHAR) AS launch_op, {CAPTURED} AS captured "
        "FROM g LEFT JOIN events l ON l.kind = 'cuda_api' "
        "AND coalesce(CAST(l.trace_id AS VARCHAR), '') = g.trace_id AND l.event_id = g.launch_event_id"
    )
    if rows.empty:
        return None
    rows = rows.sort_values(["trace_id", "launch_event_id", "start_ns"], kind="stable").reset_index(drop=True)
    out = [_stats(key, k + 1, replays) for k, (key, replays) in enumerate(_by_graph(rows))]
    out.sort(key=lambda g: -g.gpu_ns)
    dur = rows["end_ns"] - rows["start_ns"]
    return Graphs(out, bool((rows["kind"] == "graph").any()), int(dur.sum()), int(dur[rows["captured"]].sum()))


NUMBERED = re.compile(r"(?<=[#_ ])\d+$")


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


def _stats(key: str, number: int, replays: list[pd.DataFrame]) -> GraphStats:
    first = replays[0]
    whole = bool((first["kind"] == "graph").all())
    busy = np.array([int((r["end_ns"] - r["start_ns"]).sum()) for r in replays], np.int64)
    span = np.array([int(r["end_ns"].max() - r["start_ns"].min()) for r in replays], np.int64)
    # the range around the launches, its trailing number as * (a graph replayed in every step_N: step_*)
    around = Counter(NUMBERED.sub("*", str(op)) for r in replays for op in r["launch_op"].head(1) if not pd.isna(op))
    n = len(first)
    longest: list[Node] = []
    captured_by: list[CapturedOp] = []
    if not whole:
        same = [r for r in replays if len(r) == n]
        durations = np.stack([(r["end_ns"] - r["start_ns"]).to_numpy(np.int64) for r in same])
        per_node = np.median(durations, axis=0)
        names = first["name"].tolist()
        for i in np.argsort(-per_node, kind="stable")[:LONGEST]:
            longest.append(Node(str(names[i]), round(float(per_node[i]))))
        captured_by = _captured_by(first, durations)
    return GraphStats(
        name=key if whole else f"graph {number}",
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


def _captured_by(first: pd.DataFrame, durations: npt.NDArray[np.int64]) -> list[CapturedOp]:
    """The operators that captured a graph's nodes (those of its first replay, matched to its capture),
    with their nodes and GPU time per replay (``durations``: a row per replay of as many nodes)."""
    mine = first["captured"].to_numpy(bool)
    if not mine.any():
        return []
    ops = first["op_name"].to_numpy(object)
    found = [
        CapturedOp(str(op), int(nodes.sum()), round(float(np.median(durations[:, nodes].sum(axis=1)))))
        for op in dict.fromkeys(ops[mine].tolist())
        for nodes in [mine & (ops == op)]
    ]
    return sorted(found, key=lambda c: -c.ns_per_replay)[:TOP_OPS]
