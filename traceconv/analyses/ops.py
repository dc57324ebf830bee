"""Per-name tables of host operators, NVTX ranges and kernels (pure: frames in, DataFrames out).

Operator times follow ``torch.profiler``'s ``key_averages()``: summed over every call,
so an operator nested in itself counts its inner calls again.

- ``gpu_self_ns``: GPU rows (kernels, copies, memsets) attributed to the operator itself
  (the innermost operator around the launching call);
- ``gpu_total_ns``: GPU rows launched anywhere inside it on its thread (children included);
- ``cpu_total_ns``: its duration; ``cpu_self_ns``: minus its direct children (operators,
  annotations and CUDA API calls), never below 0.

As in ``key_averages()``, an operator whose only child has its own name counts once.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

OP_COLUMNS = ("name", "calls", "gpu_self_ns", "gpu_total_ns", "cpu_total_ns", "cpu_self_ns")
NVTX_COLUMNS = ("name", "count", "dur_ns", "gpu_ns", "gpu_process_ns")
KERNEL_COLUMNS = ("name", "count", "dur_ns", "avg_ns", "queue_ns", "queue_avg_ns", "time_pct", "occupancy_pct")
_SHAPE_SAMPLE = 200  # calls whose args are read for the input shapes of one operator


def op_table(ranges: pd.DataFrame) -> pd.DataFrame:
    """One row per operator or annotation name (steps as one name), longest self GPU time first."""
    ops = ranges[ranges["is_op"] & ~ranges["merged"]]
    g = ops.groupby("label", observed=True, sort=False)
    out = (
        pd.DataFrame(
            {
                "calls": g.size(),
                "gpu_self_ns": g["gpu_self_ns"].sum(),
                "gpu_total_ns": g["gpu_total_ns"].sum(),
                "cpu_total_ns": g["dur_ns"].sum().astype("int64"),
                "cpu_self_ns": g["cpu_self_ns"].sum(),
                "kind": g["kind"].first().astype(str),
            }
        )
        .rename_axis("name")
        .reset_index()
    )
    out["name"] = out["name"].astype(str)
    return _sorted(out, ["gpu_self_ns", "gpu_total_ns", "cpu_total_ns"])


def nvtx_table(ranges: pd.DataFrame) -> pd.DataFrame:
    """Host annotations and NVTX ranges: calls, time, and GPU time of the work launched inside them
    (``gpu_ns``: on the range's thread, NVIDIA's projection; ``gpu_process_ns``: by any thread of the process)."""
    spans = ranges[(ranges["kind"] == "nvtx") & ~ranges["merged"]]
    g = spans.groupby("label", observed=True, sort=False)
    out = (
        pd.DataFrame(
            {
                "count": g.size(),
                "dur_ns": g["dur_ns"].sum().astype("int64"),
                "gpu_ns": g["gpu_total_ns"].sum(),
                "gpu_process_ns": g["gpu_process_ns"].sum(),
            }
        )
        .rename_axis("name")
        .reset_index()
    )
    out["name"] = out["name"].astype(str)
    return _sorted(out, ["gpu_ns", "dur_ns"])


def kernel_table(gpu: pd.DataFrame) -> pd.DataFrame:
    """Kernels per name: count, execution total and mean, queue total and mean (launch to start)."""
    k = gpu[gpu["kind"] == "kernel"]
    dur = k["dur_ns"].fillna(0).astype("float64")
    recorded = k["occupancy_pct"].notna()
    g = k.assign(
        _name=k["name"].astype(object).fillna("(unnamed)"),
        _occ_w=(k["occupancy_pct"] * dur).where(recorded),
        _occ_t=dur.where(recorded),
    ).groupby("_name", sort=False)
    out = (
        pd.DataFrame(
            {
                "count": g.size(),
                "dur_ns": g["dur_ns"].sum().astype("int64"),
                "queue_ns": g["queue_ns"].sum().astype("int64"),
                "queued": g["queue_ns"].count(),
                "short_name": g["short_name"].first().astype(object),
                "occupancy_pct": g["_occ_w"].sum() / g["_occ_t"].sum().where(g["_occ_t"].sum() > 0),
            }
        )
        .rename_axis("name")
        .reset_index()
    )
    out["avg_ns"] = out["dur_ns"] / out["count"]
    out["queue_avg_ns"] = (out["queue_ns"] / out["queued"]).where(out["queued"] > 0)
    total = out["dur_ns"].sum()
    out["time_pct"] = out["dur_ns"] * 100.0 / total if total else 0.0
    out = out.drop(columns="queued")
    return _sorted(out, ["dur_ns", "count"])


def input_dims(table: pa.Table, ranges: pd.DataFrame, names: list[str]) -> dict[str, dict[str, Any]]:
    """For each operator name: its most frequent ``Input Dims`` (PyTorch ``record_shapes``) and how many differ.

    Reads the args of at most a sample of calls per name; names with no recorded shapes are left out.
    """
    ops = ranges[ranges["is_op"] & ~ranges["merged"] & ranges["label"].astype(str).isin(names)]
    sample = ops.groupby("label", observed=True, sort=False).head(_SHAPE_SAMPLE)
    if sample.empty or "args" not in table.column_names:
        return {}
    ids = pa.array(sample["event_id"].to_numpy(np.int64))
    rows = table.filter(pc.is_in(table["event_id"], value_set=ids)).select(["event_id", "args"]).to_pydict()
    args = dict(zip(rows["event_id"], rows["args"], strict=True))
    shapes: dict[str, Counter[str]] = {}
    for name, eid in zip(sample["label"].astype(str), sample["event_id"].to_numpy(np.int64), strict=True):
        dims = _dims(args.get(int(eid)))
        if dims is not None:
            shapes.setdefault(name, Counter())[dims] += 1
    return {n: {"input_dims": c.most_common(1)[0][0], "shapes": len(c)} for n, c in shapes.items()}


def _dims(text: str | None) -> str | None:
    if not text or "Input Dims" not in text:
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    dims = value.get("Input Dims") if isinstance(value, dict) else None
    return orjson.dumps(dims).decode() if isinstance(dims, list) else None


def _sorted(df: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    out: pd.DataFrame = df.sort_values([*by, "name"], ascending=[*[False] * len(by), True], kind="stable")
    result: pd.DataFrame = out.reset_index(drop=True)
    return result
