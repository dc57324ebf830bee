"""The roofline's rows: per operator name, per kernel name, per step, and the matrix time by engine,
from :func:`.attribution.kernels`' frame of one scope's kernels."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from traceconv.analyses.roofline.peaks import Peaks
from traceconv.analyses.roofline.position import position, roof, roof_dtype
from traceconv.analyses.roofline.results import KernelRoof, MatrixTime, OpRoof, StepRoof

CUDA_KERNELS_SHOWN = 3


def matrix_time(k: pd.DataFrame, peaks: Peaks | None) -> MatrixTime:
    dur = k["dur_ns"]
    engine, matrix = k["engine"], k["matrix"]
    cuda = k[matrix & (engine == "cuda")]
    by_dtype = cuda.groupby(cuda["dtype"].fillna("fp32"), sort=True)["dur_ns"].sum()
    names = cuda.groupby("name", observed=True)["dur_ns"].sum().sort_values(ascending=False, kind="stable")
    matrix_ns = int(dur[matrix].sum())
    known = int(dur[matrix & k["known"]].sum())
    return MatrixTime(
        tensor_ns=int(dur[matrix & (engine == "tensor")].sum()),
        cuda_ns=int(cuda["dur_ns"].sum()),
        unknown_ns=int(dur[matrix & engine.isna()].sum()),
        other_ns=int(dur[~matrix].sum()),
        cuda_by_dtype={str(d): int(ns) for d, ns in by_dtype.items() if ns},
        cuda_memory_bound_ns=_memory_bound(cuda, peaks),
        cuda_kernels=[str(n) for n in names.index[:CUDA_KERNELS_SHOWN]],
        flops_known_pct=round(known * 100.0 / matrix_ns, 1) if matrix_ns else 0.0,
    )


def _memory_bound(cuda: pd.DataFrame, peaks: Peaks | None) -> int:
    """The time of the CUDA-core kernel names whose known work is memory-bound at the CUDA cores' roof
    (the tensor cores would not make them faster)."""
    if peaks is None or not peaks.bandwidth_gbps or not len(cuda):
        return 0
    sums = cuda[cuda["known"]].groupby("name", observed=True)[["flops", "moved", "dur_ns"]].sum()
    dtypes = cuda.groupby("name", observed=True)["dtype"].first()
    out = 0
    for name, row in sums.iterrows():
        peak = peaks.cuda(str(dtypes.get(name) or "fp32"))
        if peak and row["moved"] and row["flops"] / row["moved"] < peak * 1e3 / peaks.bandwidth_gbps:
            out += int(row["dur_ns"])
    return out


def _engine(engines: Sequence[str | None], durs: Sequence[int]) -> tuple[str | None, str | None]:
    """The engine of a group of matrix kernels: ``tensor``, ``cuda``, ``mixed`` (each over a tenth of the
    time), and the one that took most of it (what the roof is taken for)."""
    time: dict[str, float] = {}
    for e, d in zip(engines, durs, strict=True):
        if e is not None:
            time[e] = time.get(e, 0.0) + d
    if not time:
        return None, None
    main = max(time, key=lambda e: time[e])
    total = sum(time.values())
    mixed = len([t for t in time.values() if t > 0.1 * total]) > 1
    return ("mixed" if mixed else main), main


def op_rows(k: pd.DataFrame, peaks: Peaks | None) -> list[OpRoof]:
    """Per operator name whose work is known: calls, FLOPs, bytes, the GPU time of its kernels, engine,
    and its place on the roofline; most FLOPs first."""
    mine = k[(k["op_key"] >= 0) & k["known"]]
    out = []
    bandwidth = peaks.bandwidth_gbps if peaks else None
    for name, g in mine.groupby("op", observed=True, sort=False):
        mat = g[g["matrix"]]
        shown, main = _engine(list(mat["engine"]), list(mat["dur_ns"]))
        dtype = roof_dtype(main, _main(mat, "dtype"), _main(g, "op_dtype"))
        flops, moved, ns = round(g["flops"].sum()), round(g["moved"].sum()), int(g["dur_ns"].sum())
        p = position(flops, moved, ns, roof(peaks, main, dtype), bandwidth)
        out.append(OpRoof(str(name), int(g["op_key"].nunique()), flops, moved, ns, shown, dtype, **vars(p)))
    return sorted(out, key=lambda r: (-r.flops, r.name))


def _main(g: pd.DataFrame, column: str) -> str | None:
    """The value of ``column`` that took the most of the group's time."""
    values = g[column].dropna() if column in g else pd.Series([], dtype=object)
    if values.empty:
        return None
    return str(g.loc[values.index].groupby(column, observed=True)["dur_ns"].sum().idxmax())


def kernel_rows(
    k: pd.DataFrame, peaks: Peaks | None, tensor_active: dict[str, float] | None = None
) -> list[KernelRoof]:
    """Per kernel name: count, time, engine, the FLOPs that fell to it and their place on the roofline;
    most time first."""
    bandwidth = peaks.bandwidth_gbps if peaks else None
    dur, known, flops, moved = (k[c].to_numpy() for c in ("dur_ns", "known", "flops", "moved"))
    calls = k["calls"].to_numpy() if "calls" in k.columns else None
    engines, dtypes, rules = (k[c].to_numpy() for c in ("engine", "dtype", "rule"))  # per name: its first row's
    op_dtype = _main_per_name(k, "op_dtype")
    out = []
    for name, at in k.groupby("name", observed=True, sort=False).indices.items():
        first = at[0]
        ns = int(dur[at].sum())
        mine = known[at]
        known_ns = int(dur[at][mine].sum())  # a name some of whose operators' FLOPs are not known:
        has = bool(mine.any())  # its rate over the calls whose FLOPs are
        f, m = round(flops[at].sum()), round(moved[at].sum())
        engine = _none(engines[first])
        dtype = roof_dtype(engine, _none(dtypes[first]), op_dtype.get(name))
        p = position(f, m, known_ns, roof(peaks, engine, dtype), bandwidth) if has else None
        out.append(
            KernelRoof(
                name=str(name),
                count=int(calls[at].sum()) if calls is not None else len(at),
                dur_ns=ns,
                rule=str(rules[first]),
                engine=engine,
                dtype=_none(dtypes[first]),
                flops=f if has else None,
                known_ns=known_ns,
                tflops=p.tflops if p else None,
                bound=p.bound if p else None,
                pct_of_roof=p.pct_of_roof if p else None,
                tensor_active_pct=(tensor_active or {}).get(str(name)),
            )
        )
    return sorted(out, key=lambda r: (-r.dur_ns, r.name))


def _main_per_name(k: pd.DataFrame, column: str) -> dict[object, str]:
    """Per kernel name, :func:`_main`'s value of ``column`` (names without one left out)."""
    given = k[k[column].notna()]
    sums = given.groupby(["name", column], observed=True, sort=True)["dur_ns"].sum().reset_index()
    # the value of most time, the first in the values' order where several tie (as idxmax picks)
    top = sums.sort_values(["name", "dur_ns"], ascending=[True, False], kind="stable").drop_duplicates("name")
    return {n: str(v) for n, v in zip(top["name"], top[column], strict=True)}


def _none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def step_rows(k: pd.DataFrame, step: np.ndarray, dur_ns: np.ndarray, gpus: int, peak: float | None) -> list[StepRoof]:
    """Per window (``step``: each kernel's window, -1 outside): FLOPs per GPU, time, TFLOP/s and MFU."""
    inside = step >= 0
    flops = np.bincount(step[inside], weights=k["flops"].to_numpy()[inside], minlength=len(dur_ns)) / max(gpus, 1)
    ns = np.asarray(dur_ns)
    tflops = np.zeros(len(ns), np.float64)
    np.divide(flops, ns, out=tflops, where=ns > 0)
    tflops /= 1e3
    rate = np.round(tflops, 2).tolist()
    mfu = np.round(tflops * 100 / peak, 2).tolist() if peak else [None] * len(ns)
    return [
        StepRoof(i, d, round(f), r, m)
        for i, (d, f, r, m) in enumerate(zip(ns.tolist(), flops.tolist(), rate, mfu, strict=True))
    ]
