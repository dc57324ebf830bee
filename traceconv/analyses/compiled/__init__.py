"""Compiled programs (``torch.compile``): their regions, the operations Inductor fused, and the
time spent compiling.

:func:`compiled` runs the stages in the order the data flows:

1. :mod:`.names`: what each Triton kernel's name says it fuses (``triton_poi_fused_add_mul_0`` ->
   add, mul);
2. :mod:`.regions`: the compiled regions in the host ranges and the GPU time launched in each;
3. :mod:`.compiles`: Dynamo's compilations and their host time (the ``RECOMPILES`` finding,
   :mod:`traceconv.analyses.summary.recompiles`, judges the ones inside steps);

and :mod:`.families` lines up an eager run and a compiled one by operator family (``diff``).

A profile with no Triton kernel, compiled region or compilation has nothing compiled: ``None``.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from traceconv.analyses.compiled.compiles import Compile, compiles
from traceconv.analyses.compiled.names import fused_ops, kernel_kind
from traceconv.analyses.compiled.regions import RegionRow, regions
from traceconv.analyses.source import Source
from traceconv.analyses.vocabulary import gpu_names

__all__ = ["Compile", "Compiled", "FusedOp", "RegionRow", "compiled", "fused_table"]


@dataclass(frozen=True)
class FusedOp:
    """An aten operation and the Triton kernels that fuse it (a kernel fusing several counts in each)."""

    op: str
    gpu_ns: int  # execution time of the kernels that fuse it
    launches: int
    kernels: int  # distinct kernel names


@dataclass(frozen=True)
class Compiled:
    gpu_ns: int  # every kernel's execution time
    in_regions_ns: int  # of kernels launched inside a compiled region
    triton_ns: int  # of Inductor's Triton kernels
    triton_launches: int
    regions: list[RegionRow]  # most GPU time first
    fused: list[FusedOp]  # most GPU time first
    compiles: list[Compile]  # in time order

    @property
    def compile_ns(self) -> int:
        return sum(c.dur_ns for c in self.compiles)


_KERNELS_SQL = (
    "SELECT name, count(*) AS launches, total(dur_ns) AS dur_ns FROM events WHERE kind = 'kernel' GROUP BY name"
)


def compiled(source: Source) -> Compiled | None:
    """What the profile holds of a compiled program; None when it holds nothing compiled."""
    rows, inside = regions(source)
    made = compiles(source)
    named = any(kernel_kind(str(n)) is not None for k, n, _ in gpu_names(source) if k == "kernel")
    if not named and not rows and not made:  # no Triton kernel among the kernels' names
        return None
    kernels = source.frame(_KERNELS_SQL)
    names = kernels["name"].astype(str)
    triton = kernels[names.map(lambda n: kernel_kind(n) is not None)]
    return Compiled(
        gpu_ns=int(kernels["dur_ns"].sum()),
        in_regions_ns=inside,
        triton_ns=int(triton["dur_ns"].sum()),
        triton_launches=int(triton["launches"].sum()),
        regions=rows,
        fused=_fused(fused_table(triton)),
        compiles=made,
    )


def fused_table(kernels: pd.DataFrame) -> pd.DataFrame:
    """Kernels (``name``, and measures) one row per operation each fuses (``op``); kernels that fuse none left out."""
    ops = kernels["name"].astype(str).map(fused_ops)
    out: pd.DataFrame = kernels.assign(op=ops).explode("op").dropna(subset=["op"]).reset_index(drop=True)
    return out


def _fused(table: pd.DataFrame) -> list[FusedOp]:
    if table.empty:
        return []
    per = table.groupby("op", sort=False).agg(
        gpu_ns=("dur_ns", "sum"), launches=("launches", "sum"), kernels=("name", "nunique")
    )
    per = per.reset_index().sort_values(["gpu_ns", "op"], ascending=[False, True], kind="stable")
    return [FusedOp(str(r.op), int(r.gpu_ns), int(r.launches), int(r.kernels)) for r in per.itertuples(index=False)]
