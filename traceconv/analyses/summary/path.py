"""The critical path of each step, from the sweep's account of every step's time (stage 2).

At every instant of a step's window (as the program lived it), either a GPU runs work and the step
waits for it (compute, then communication, then copies where they overlap), or the GPU is idle and
the step waits for what kept it so: each idle gap charged to what happened when the GPU ran out of
work (:mod:`.timeline.gaps`): a sync, launch overhead, the host's own work, a dependency of the GPU's
own. The host's long gaps are split between work inside operators and ranges and the rest in the
proportion the scope's gaps show. Per GPU where a process drives several. ``whatif`` replays the
same breakdown for a changed graph (:mod:`traceconv.analyses.whatif.path`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceconv.analyses.results import PATH_PARTS, CriticalPath, IdleGaps
from traceconv.analyses.summary.measure import ScopeStats
from traceconv.analyses.summary.timeline.busy import PARTS

TOP_ITEMS = 5


def of_scope(stats: ScopeStats | None) -> CriticalPath | None:
    """The critical path of a scope's steps (None: no steps)."""
    if stats is None or stats.per_step is None or not len(stats.per_step):
        return None
    return critical_path(stats.per_step, stats.gaps, len(stats.gpu), stats.kernels)


def critical_path(per_step: np.ndarray, gaps: IdleGaps, devices: int, kernels: pd.DataFrame) -> CriticalPath:
    """``per_step``: each step's time by the sweep's parts (:data:`.timeline.busy.PARTS`), summed over
    ``devices``; ``gaps``: the scope's (for the host's split); ``kernels``: the scope's kernel table."""
    col = {p: per_step[:, PARTS.index(p)] for p in PARTS}
    host = col["host_api"] + col["host_other"]
    outside = gaps.host_outside_ops_ns / gaps.host_ns if gaps.host_ns else 1.0
    host_other = np.rint(host * outside).astype(np.int64)
    parts = np.stack(
        [
            col["compute"],
            col["copies"],
            col["communication"],
            col["sync"],
            col["launch"],
            host - host_other,
            host_other,
            col["queued"],
        ],
        axis=1,
    ) // max(devices, 1)
    total = parts.sum(axis=1)
    mid = int(np.argsort(total, kind="stable")[len(total) // 2])
    return CriticalPath(
        step_ns=int(total[mid]),
        parts=dict(zip(PATH_PARTS, (int(v) for v in parts[mid]), strict=True)),
        median_ns={p: round(float(v)) for p, v in zip(PATH_PARTS, np.median(parts, axis=0), strict=True)},
        longest=[
            {"name": str(r.name), "ns_per_step": round(float(r.dur_ns) / len(total))}
            for r in kernels.head(TOP_ITEMS).itertuples()
        ],
    )
