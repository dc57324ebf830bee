"""Replayed graph nodes back to the code that created them (``--cuda-graph-trace=node``).

With node tracing, a replayed kernel, copy or memset carries its ``graphNodeId``: a node of the
instantiated graph. Nsight Systems writes every node's creation in ``CUDA_GRAPH_NODE_EVENTS`` (the
time and thread of the call that made it, a stream capture's launch or a ``cudaGraphAdd*Node``),
and an instantiated node as a clone whose ``originalGraphNodeId`` is the node it copies. Followed
back to the node first created, that creation's time and thread say which NVTX range (an operator
of ``--pytorch=autograd-nvtx``, an annotation) made the work: the range around it on its thread,
as for any call. A creation before the profile (a graph captured before the capture range) lies in
no recorded range, and the row keeps the range around its ``cudaGraphLaunch``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from traceconv.readers.arrow_util import I64
from traceconv.readers.nsys.sql import Database

TABLE = "CUDA_GRAPH_NODE_EVENTS"


@dataclass(frozen=True)
class NodeOrigins:
    """Per graph node id (sorted ``node``): the thread and time of its first ancestor's creation."""

    node: I64
    gtid: I64
    time: I64

    def of(self, node: I64) -> tuple[I64, I64]:
        """(thread, time) of the creation behind each node id, -1 where the export has none."""
        none = np.full(len(node), -1, dtype=np.int64)
        if not len(self.node):
            return none, none.copy()
        at = np.minimum(np.searchsorted(self.node, node), len(self.node) - 1)
        known = (node >= 0) & (self.node[at] == node)
        return np.where(known, self.gtid[at], -1), np.where(known, self.time[at], -1)


def node_origins(db: Database) -> NodeOrigins | None:
    """The creations behind the export's graph nodes, None without node events."""
    if not db.has(TABLE) or not {"graphNodeId", "originalGraphNodeId"} <= set(db.columns(TABLE)):
        return None
    rows = db.rows(
        TABLE,
        f"SELECT graphNodeId, coalesce(originalGraphNodeId, -1), coalesce(globalTid, -1), start FROM {TABLE}",
    )
    if not rows:
        return None
    node, parent, gtid, time = (np.array(c, dtype=np.int64) for c in zip(*rows, strict=True))
    # A clone is written twice (made, then with the node it copies): the row that names it wins.
    order = np.lexsort((time, parent < 0, node))
    node, parent, gtid, time = node[order], parent[order], gtid[order], time[order]
    first = np.r_[True, node[1:] != node[:-1]]
    node, parent, gtid, time = node[first], parent[first], gtid[first], time[first]
    root = np.arange(len(node))
    for _ in range(len(node)):  # clones of clones: follow each to the node first created
        at = np.searchsorted(node, parent[root])
        at = np.minimum(at, len(node) - 1)
        up = (parent[root] >= 0) & (node[at] == parent[root]) & (at != root)
        if not up.any():
            break
        root = np.where(up, at, root)
    return NodeOrigins(node, gtid[root], time[root])
