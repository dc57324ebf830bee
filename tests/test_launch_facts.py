"""The summary's kernel launch figures (``gpu.launch_facts``: counts, medians, kernels shorter than
their launch call and their names, occupancy and its limiters, NCCL left out) against the same
figures computed row by row in pandas from the unified table of every real trace of both sources,
for each scope the summary measures: the kernels whose anchor (the launch call's start, else their
own) lies in one of the scope's windows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from traceconv.analyses import intervals as I
from traceconv.analyses.common import load
from traceconv.analyses.results import LaunchFacts
from traceconv.analyses.source import Source
from traceconv.analyses.summary import summarize
from traceconv.analyses.summary.scopes import Scope

from .conftest import fixture_files

TRACES = [
    *fixture_files("nsys/h200", ["*.sqlite"]),
    *fixture_files("nsys/public", ["*.sqlite"]),
    *fixture_files("pytorch/h200", ["*.json", "*.json.gz"]),
    *fixture_files("pytorch/public", ["*.json", "*.json.gz"]),
]
OCCUPANCY = ("est_occupancy_pct", "theoretical_occupancy_pct", "occupancy_pct")
COLUMNS = (
    *("kind", "name", "event_id", "start_ns", "dur_ns", "queue_ns", "launch_start_ns", "launch_end_ns"),
    "launch_name",
)


def _median(values: pd.Series) -> int | None:
    if not len(values):
        return None
    v = np.sort(values.to_numpy(np.int64))  # the middle one, or the mean of the two middle ones
    return round((int(v[(len(v) - 1) // 2]) + int(v[len(v) // 2])) / 2)


def _truth(table: pa.Table, scope: Scope) -> dict[str, Any]:
    exact = {pa.int64(): pd.Int64Dtype(), pa.int32(): pd.Int64Dtype()}.get  # no float64 for nanoseconds
    frame = table.select([c for c in (*COLUMNS, "occupancy_limiter") if c in table.column_names]).to_pandas(
        types_mapper=exact
    )
    occupancy = [c for c in OCCUPANCY if c in table.column_names]  # the computed figure first
    frame["occ"] = table.select(occupancy).to_pandas().bfill(axis=1).iloc[:, 0] if occupancy else np.nan
    anchor = frame["launch_start_ns"].fillna(frame["start_ns"]).fillna(np.iinfo(np.int64).min).to_numpy(np.int64)
    starts, ends = I.union(scope.start_ns, scope.end_ns)
    at = np.searchsorted(starts, anchor, side="right") - 1
    inside = (at >= 0) & (anchor <= ends[np.maximum(at, 0)])
    k = frame[(frame["kind"] == "kernel").to_numpy(bool) & inside].copy()
    if "occupancy_limiter" not in k:
        k["occupancy_limiter"] = None
    api = (k["launch_end_ns"] - k["launch_start_ns"]).astype("Float64")
    # a kernel replayed from a CUDA graph has no launch call of its own: the graph's launches them all
    replayed = k["launch_name"].astype(object).fillna("").str.contains(r"^(?:cuda|hip|cu)Graph(?:Launch|Replay)")
    api[replayed.to_numpy(bool)] = pd.NA
    dur = k["dur_ns"].astype("Float64")
    tiny = k[(dur < api).fillna(False).to_numpy(bool)]
    nccl = k["name"].fillna("").str.lower().str.startswith("nccl")
    judged = k[k["occ"].notna().to_numpy(bool) & ~nccl.to_numpy(bool)]
    weight = judged["dur_ns"].fillna(0).astype(float)
    names = tiny.assign(name=tiny["name"].fillna("None")).groupby("name")["event_id"].agg(["size", "min"])
    names = names.reset_index().sort_values(["size", "min"], ascending=[False, True]).head(3)
    limited = judged[judged["occupancy_limiter"].notna().to_numpy(bool)]
    limits = limited.assign(lim=limited["occupancy_limiter"].astype(str)).groupby("lim")["dur_ns"].sum()
    limits = limits.reset_index().sort_values(["dur_ns", "lim"], ascending=[False, True])
    return {
        "kernels": len(k),
        "launched": int(api.notna().sum()),
        "shorter_than_launch": len(tiny),
        "tiny_median_ns": _median(tiny["dur_ns"].dropna()),
        "launch_median_ns": _median(api.dropna()),
        "tiny_names": dict(zip(names["name"], names["size"].astype(int), strict=True)),
        "queue_median_ns": _median(k["queue_ns"].dropna()),
        "queued": int(k["queue_ns"].notna().sum()),
        "occupancy_pct": float((judged["occ"] * weight).sum() / weight.sum()) if weight.sum() else None,
        "occupancy_kernels": len(judged),
        "occupancy_limiters": dict(zip(limits["lim"], limits["dur_ns"].astype(int), strict=True)),
    }


@pytest.mark.parametrize("path", TRACES, ids=lambda p: Path(p).name)
def test_launch_facts_are_those_of_the_kernels(path: Path) -> None:
    table = load(path)
    with Source(table) as source:
        summary = summarize(source)
    for stats in (summary.window, summary.steps):
        if stats is None:
            continue
        want = _truth(table, stats.scope)
        if stats is summary.window and summary.steps is not None:
            # the medians are measured for the summary's focus (the steps) only: nothing reads the window's
            want.update(dict.fromkeys(("tiny_median_ns", "launch_median_ns", "queue_median_ns")))
        got: LaunchFacts = stats.launch
        occupancy = want.pop("occupancy_pct")
        assert {k: getattr(got, k) for k in want} == want, stats.scope.name
        assert got.occupancy_pct == (None if occupancy is None else pytest.approx(occupancy, rel=1e-9))
