"""What the compiler fused, lined up by operator family: the eager run's GPU time per family of
operators against the compiled run's kernels that do that family's work.

A kernel's operations are, for an Inductor kernel, the aten operations its name says it fuses
(:func:`.names.fused_ops`), else its operator (``op_name``: ``aten::addmm`` for an extern GEMM in a
compiled run as in an eager one); their families (:func:`.names.family`) are what the two runs are
lined up by. A kernel fusing several families counts in each (the rows overlap: that is what fusion
is), and says which others it fused them with.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceconv.analyses.compiled.names import family, fused_ops
from traceconv.analyses.source import Source

NO_OPERATOR = "(no operator)"
WITH = 5  # the families named beside one that was fused


@dataclass(frozen=True)
class FamilyChange:
    """One family of operators in two runs, per step: GPU time and launches of the kernels doing its work."""

    family: str
    before_ns: int
    before_launches: float
    after_ns: int
    after_launches: float
    after_fused_ns: int  # of after_ns, in Inductor's kernels
    fused_with: list[str]  # the families the after run's Inductor kernels fuse it with, most GPU time first


def kernels_by_family(source: Source, starts: np.ndarray, ends: np.ndarray) -> pd.DataFrame:
    """The kernels launched inside the windows ``[starts[i], ends[i]]``, one row per family each does
    the work of: ``family``, ``name``, ``launches``, ``dur_ns``, ``fused`` (an Inductor kernel), ``families``."""
    w = source.within("family_windows", starts, ends)
    at = "coalesce(k.launch_start_ns, k.start_ns)"
    rows = source.frame(
        f"SELECT k.name, k.op_name, count(*) AS launches, total(k.dur_ns) AS dur_ns FROM events k{w.join(at)} "
        f"WHERE k.kind = 'kernel' AND {w.test(at)} GROUP BY k.name, k.op_name"
    )
    names, ops = rows["name"].astype(str), rows["op_name"].astype("string")
    fused = [fused_ops(n) for n in names]
    fams = pd.Series(
        [
            sorted({family(o) for o in f} or ({family(op)} if isinstance(op, str) else {NO_OPERATOR}))
            for f, op in zip(fused, ops, strict=True)
        ],
        index=rows.index,
        dtype=object,
    )
    out = rows.assign(name=names, fused=[bool(f) for f in fused], families=fams, family=fams)
    exploded: pd.DataFrame = out.explode("family").reset_index(drop=True)
    return exploded


def line_up(before: pd.DataFrame, after: pd.DataFrame, steps: tuple[int, int], top: int = 0) -> list[FamilyChange]:
    """The families of two runs (:func:`kernels_by_family`), per step, the eager run's biggest first,
    then those only the compiled run has."""
    b = before.groupby("family")[["dur_ns", "launches"]].sum()
    a = after.groupby("family")[["dur_ns", "launches"]].sum()
    order = [*b["dur_ns"].sort_values(ascending=False, kind="stable").index]
    order += [f for f in a["dur_ns"].sort_values(ascending=False, kind="stable").index if f not in b.index]
    nb, na = max(steps[0], 1), max(steps[1], 1)
    rows = []
    for fam in order[:top] if top else order:
        mine = after[after["family"] == fam]
        fused = mine[mine["fused"]]
        rows.append(
            FamilyChange(
                family=str(fam),
                before_ns=round(float(b["dur_ns"].get(fam, 0)) / nb),
                before_launches=round(float(b["launches"].get(fam, 0)) / nb, 2),
                after_ns=round(float(a["dur_ns"].get(fam, 0)) / na),
                after_launches=round(float(a["launches"].get(fam, 0)) / na, 2),
                after_fused_ns=round(float(fused["dur_ns"].sum()) / na),
                fused_with=_partners(fused, str(fam)),
            )
        )
    return rows


def _partners(fused: pd.DataFrame, fam: str) -> list[str]:
    """The other families in the Inductor kernels that do a family's work, by their GPU time."""
    time: dict[str, float] = {}
    for families, dur in zip(fused["families"], fused["dur_ns"], strict=True):
        for other in families:
            if other != fam:
                time[other] = time.get(other, 0.0) + float(dur)
    return sorted(time, key=lambda k: (-time[k], k))[:WITH]
