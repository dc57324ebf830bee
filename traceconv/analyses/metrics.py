"""GPU utilisation from sampled GPU metrics (rows of kind ``metric``), per scope, out of core.

Nsight Systems samples each GPU's counters (``nsys profile --gpu-metrics-devices``): SMs
Active, SM Issue, Compute Warps in Flight, Tensor Active, DRAM bandwidth ... at 10-200 kHz.
A scope's figure for a metric is the plain mean of the samples whose timestamp lies inside
the scope's intervals (ends included): the steps (the whole window when no steps are marked),
the ranges of one NVTX range or annotation name, or the executions of one kernel name on
the sample's device. A sample inside two intervals of the same scope counts once. The ``[Avg]``
metrics are no averages (sums over a sample's cycles, wrapped by some nsys versions: see
:mod:`traceconv.readers.nsys.samples`) and are left out; their ``[Avg Warps per Cycle]`` are kept.

Metric names become keys (:func:`metric_key`): the ones the findings and tables use have
fixed keys (:data:`KEYS`, e.g. ``SMs Active [Throughput %]`` -> ``sm_active_pct``); any other
metric keeps a slug of its own name (``GPC Clock Frequency [MHz]`` -> ``gpc_clock_frequency_mhz``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from traceconv.analyses import intervals as I
from traceconv.analyses.source import Source, literals

# nsys metric names (TARGET_INFO_GPU_METRICS, Hopper set of nsys 2025.3) -> keys.
KEYS = {
    "SMs Active [Throughput %]": "sm_active_pct",
    "SM Issue [Throughput %]": "sm_issue_pct",
    "Compute Warps in Flight [Throughput %]": "warps_in_flight_pct",
    "Tensor Active [Throughput %]": "tensor_active_pct",
    "DRAM Read Bandwidth [Throughput %]": "dram_read_pct",
    "DRAM Write Bandwidth [Throughput %]": "dram_write_pct",
    "GR Active [Throughput %]": "gr_active_pct",
    "PCIe RX Throughput [Throughput %]": "pcie_rx_pct",
    "PCIe TX Throughput [Throughput %]": "pcie_tx_pct",
}
# The metrics shown per kernel name and per range (the rest only per device).
PER_NAME = ("sm_active_pct", "warps_in_flight_pct")
# Kernels and samples meet in time buckets of this width (an equality DuckDB hashes), then by
# their exact times: a kernel adds one row per bucket it spans.
BUCKET_NS = 1_000_000
_UNITS = {"throughput %": "pct", "%": "pct"}
SUMS = "Avg"  # the unit of the metrics that are sums over a sample's cycles, not averages

# Devices as text (JSON keys), metric key -> mean.
Utilisation = dict[str, dict[str, float]]


def metric_key(name: str) -> str:
    """The key of an nsys metric name: :data:`KEYS`, else a slug of the name and its unit."""
    if name in KEYS:
        return KEYS[name]
    m = re.match(r"^(.*?)\s*\[([^\]]*)\]\s*$", name)
    base, unit = (m.group(1), m.group(2)) if m else (name, "")
    unit = _UNITS.get(unit.strip().lower(), unit)
    slug = re.sub(r"[^a-z0-9]+", "_", f"{base} {unit}".lower()).strip("_")
    return slug or "metric"


def has_metrics(source: Source) -> bool:
    return bool(source.scalar("SELECT count(*) FROM (SELECT 1 FROM events WHERE kind = 'metric' LIMIT 1)"))


def _spans(source: Source, name: str, start_ns: I.I64, end_ns: I.I64) -> None:
    lo, hi = I.union(np.asarray(start_ns, np.int64), np.asarray(end_ns, np.int64))
    source.register(name, pa.table({"s": pa.array(lo, pa.int64()), "e": pa.array(hi, pa.int64())}))


def scope_means(source: Source, start_ns: I.I64 | None = None, end_ns: I.I64 | None = None) -> Utilisation:
    """Per device, the mean of each metric over the samples inside the intervals (all samples
    without them); keys by :func:`metric_key`, means rounded to 2 decimals."""
    if not has_metrics(source):
        return {}
    where = f"m.kind = 'metric' AND m.value IS NOT NULL AND m.unit IS DISTINCT FROM '{SUMS}'"
    if start_ns is None or end_ns is None:
        join = ""
    else:
        _spans(source, "metric_spans", start_ns, end_ns)
        join = "JOIN metric_spans w ON m.start_ns >= w.s AND m.start_ns <= w.e"
    rows = source.arrow(
        f"SELECT CAST(m.device AS BIGINT) AS device, CAST(m.name AS VARCHAR) AS name, avg(m.value) AS mean "
        f"FROM events m {join} WHERE {where} GROUP BY ALL ORDER BY device NULLS LAST, name"
    ).to_pylist()
    out: Utilisation = {}
    for r in rows:
        device = "None" if r["device"] is None else str(r["device"])
        out.setdefault(device, {})[metric_key(str(r["name"]))] = round(float(r["mean"]), 2)
    return out


def _names_sql(keys: Sequence[str]) -> str:
    return literals(n for n, k in KEYS.items() if k in keys)


def per_kernel(source: Source, keys: Sequence[str] = PER_NAME) -> pd.DataFrame:
    """Per kernel name: the mean of ``keys`` over the samples that fall inside that name's
    executions on their device, and how many samples that was (``samples``). Kernels with no
    sample inside (shorter than the sampling period, mostly) are absent."""
    if not has_metrics(source):
        return _empty(keys)
    frame = source.frame(
        "WITH k AS (SELECT CAST(name AS VARCHAR) AS kernel, CAST(device AS BIGINT) AS device, start_ns AS s, "
        f"start_ns + dur_ns AS e, unnest(range(start_ns // {BUCKET_NS}, (start_ns + dur_ns) // {BUCKET_NS} + 1)) "
        "AS b FROM events WHERE kind = 'kernel' AND start_ns IS NOT NULL AND dur_ns IS NOT NULL), "
        "m AS (SELECT CAST(device AS BIGINT) AS device, CAST(name AS VARCHAR) AS metric, start_ns AS t, "
        f"start_ns // {BUCKET_NS} AS b, value FROM events WHERE kind = 'metric' AND value IS NOT NULL "
        f"AND name IN ({_names_sql(keys)})) "
        "SELECT kernel, metric, avg(value) AS mean, count(*) AS n FROM (SELECT DISTINCT k.kernel, m.device, "
        "m.metric, m.t, m.value FROM k JOIN m ON m.device = k.device AND m.b = k.b AND m.t >= k.s AND m.t <= k.e) "
        "GROUP BY ALL"
    )
    out: pd.DataFrame = _wide(frame, "kernel", keys)
    return out


def per_range(source: Source, keys: Sequence[str] = PER_NAME) -> pd.DataFrame:
    """Per host NVTX range / annotation name (all devices together): the mean of ``keys`` over the samples
    inside that name's ranges, and how many samples (``samples``)."""
    if not has_metrics(source):
        return _empty(keys)
    frame = source.frame(
        "WITH r AS (SELECT CAST(name AS VARCHAR) AS range_name, start_ns AS s, end_ns AS e FROM events "
        "WHERE kind = 'nvtx' AND device IS NULL AND start_ns IS NOT NULL AND end_ns IS NOT NULL), "
        "m AS (SELECT CAST(device AS BIGINT) AS device, CAST(name AS VARCHAR) AS metric, start_ns AS t, value "
        f"FROM events WHERE kind = 'metric' AND value IS NOT NULL AND name IN ({_names_sql(keys)})) "
        "SELECT range_name, metric, avg(value) AS mean, count(*) AS n FROM (SELECT DISTINCT r.range_name, m.device, "
        "m.metric, m.t, m.value FROM r JOIN m ON m.t >= r.s AND m.t <= r.e) GROUP BY ALL"
    )
    out: pd.DataFrame = _wide(frame, "range_name", keys)
    return out


def _empty(keys: Sequence[str]) -> pd.DataFrame:
    out: pd.DataFrame = pd.DataFrame({c: [] for c in ("name", *keys, "samples")})
    return out


def _wide(frame: pd.DataFrame, by: str, keys: Sequence[str]) -> pd.DataFrame:
    """One row per ``by`` name: a column per metric key, ``samples`` that of the first key."""
    frame = frame.assign(key=frame["metric"].map(metric_key))
    means = frame.pivot_table(index=by, columns="key", values="mean", aggfunc="first")
    counts = frame.pivot_table(index=by, columns="key", values="n", aggfunc="first")
    out = pd.DataFrame({"name": means.index.astype(str)})
    for k in keys:
        out[k] = means[k].to_numpy(dtype="float64") if k in means else np.nan
    first = next((k for k in keys if k in counts), None)
    out["samples"] = counts[first].fillna(0).to_numpy(dtype="int64") if first else 0
    result: pd.DataFrame = out.sort_values("name", kind="stable").reset_index(drop=True)
    return result
