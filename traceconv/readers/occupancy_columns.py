"""The occupancy columns of kernel rows, for every reader: the devices a trace reports, and
:func:`traceconv.readers.occupancy.fit` once per distinct (device, configuration).

A kernel without a launch configuration (block size, registers, shared memory) or whose device
the trace does not describe gets nulls; one without a grid size gets no estimated figure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from traceconv.readers.arrow_util import I64, first_codes, from_codes, text_is, to_numpy
from traceconv.readers.occupancy import LIMITERS, Device, Fit, Result, fit, occupancy

THEORETICAL, EST, LIMITER, VS_KINETO = (
    "theoretical_occupancy_pct",
    "est_occupancy_pct",
    "occupancy_limiter",
    "occupancy_vs_kineto",
)
KINETO_NO_OPT_IN = "kineto assumes no opt-in shared memory"
KINETO_OTHER = "kineto's figure differs from the calculator's"
_CONFIG = (
    *("block_x", "block_y", "block_z", "grid_x", "grid_y", "grid_z"),
    *("registers_per_thread", "shared_memory_bytes", "device"),
)
Col: TypeAlias = "pa.Array[Any] | pa.ChunkedArray[Any]"
Bools = npt.NDArray[np.bool_]

# Device field -> key in Kineto's ``deviceProperties`` (CUDA builds; ROCm's lack the register
# and per-SM shared memory keys, so AMD GPUs get no figures).
_KINETO_KEYS = {
    "major": "computeMajor",
    "minor": "computeMinor",
    "sms": "numSms",
    "warp_size": "warpSize",
    "threads_per_sm": "maxThreadsPerMultiprocessor",
    "threads_per_block": "maxThreadsPerBlock",
    "regs_per_sm": "regsPerMultiprocessor",
    "regs_per_block": "regsPerBlock",
    "smem_per_sm": "sharedMemPerMultiprocessor",
    "smem_per_block": "sharedMemPerBlock",
    "smem_per_block_optin": "sharedMemPerBlockOptin",
}
# Nsight Systems: TARGET_INFO_GPU (2021.2+), TARGET_INFO_CUDA_GPU (older: no opt-in limit).
_NSYS_KEYS = (
    {
        "id": "id",
        "major": "computeMajor",
        "minor": "computeMinor",
        "sms": "smCount",
        "warp_size": "threadsPerWarp",
        "warps_per_sm": "maxWarpsPerSm",
        "threads_per_block": "maxThreadsPerBlock",
        "regs_per_sm": "maxRegistersPerSm",
        "regs_per_block": "maxRegistersPerBlock",
        "smem_per_sm": "maxShmemPerSm",
        "smem_per_block": "maxShmemPerBlock",
        "smem_per_block_optin": "maxShmemPerBlockOptin",
        "blocks_per_sm": "maxBlocksPerSm",
    },
    {
        "id": "deviceId",
        "major": "computeCapabilityMajor",
        "minor": "computeCapabilityMinor",
        "sms": "numMultiprocessors",
        "warp_size": "numThreadsPerWarp",
        "warps_per_sm": "maxWarpsPerMultiprocessor",
        "threads_per_block": "maxThreadsPerBlock",
        "regs_per_sm": "maxRegistersPerMultiprocessor",
        "regs_per_block": "maxRegistersPerBlock",
        "smem_per_sm": "maxSharedMemoryPerMultiprocessor",
        "smem_per_block": "maxSharedMemoryPerBlock",
        "blocks_per_sm": "maxBlocksPerMultiprocessor",
    },
)
_OPTIONAL = frozenset({"smem_per_block_optin", "blocks_per_sm"})  # 0 or absent: not reported


@dataclass(frozen=True)
class Devices:
    """The GPUs kernels ran on: by the id in their ``device`` column, or one for every kernel."""

    by_id: dict[int, Device]
    every: Device | None = None  # set when all the trace's GPUs have the same limits

    @classmethod
    def kineto(cls, properties: object) -> Devices:
        """From a PyTorch trace's ``deviceProperties``, whose ``id`` is the kernels' ``device``."""
        found = {}
        for props in properties if isinstance(properties, list) else []:
            if isinstance(props, dict) and _whole(props.get("id")):
                device = _device({f: props.get(k) for f, k in _KINETO_KEYS.items()})
                if device is not None:
                    found[int(props["id"])] = device
        return cls(found)

    @classmethod
    def nsys(cls, gpus: list[dict[str, Any]], same_ids: bool) -> Devices:
        """From the rows of TARGET_INFO_GPU or TARGET_INFO_CUDA_GPU. Where every GPU has the same
        limits, which one a kernel ran on does not matter; otherwise a kernel's ``device`` is taken
        as a GPU's id only where the export says GPU ids and CUDA device ids agree (``same_ids``)."""
        found: dict[int, Device | None] = {}
        for row in gpus:
            for keys in _NSYS_KEYS:
                device = _device({f: row.get(k) for f, k in keys.items() if f != "id"})
                if device is not None and _whole(row.get(keys["id"])):
                    key = int(row[keys["id"]])
                    found[key] = device if found.get(key, device) == device else None  # rows that disagree: none
                    break
        alike = set(found.values())
        if len(alike) == 1 and None not in alike:
            return cls({}, alike.pop())
        return cls({k: d for k, d in found.items() if d is not None} if same_ids else {})

    def lookup(self, device_ids: I64) -> tuple[list[Device], I64]:
        """The distinct devices of the rows and each row's index into them (-1: none known)."""
        if self.every is not None:
            return [self.every], np.zeros(len(device_ids), dtype=np.int64)
        ids = sorted(self.by_id)
        at = np.searchsorted(np.array(ids, dtype=np.int64), device_ids) if ids else np.zeros(len(device_ids), np.int64)
        hit = np.array([*ids, -1], dtype=np.int64)[np.minimum(at, len(ids))] == device_ids
        return [self.by_id[i] for i in ids], np.where(hit & (device_ids >= 0), at, -1)


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _device(values: dict[str, Any]) -> Device | None:
    """A Device from its fields (``warps_per_sm`` standing for ``threads_per_sm`` where given);
    None where a field it needs is missing or not a positive whole number."""
    if "warps_per_sm" in values:
        warps, warp = values.pop("warps_per_sm"), values.get("warp_size")
        values["threads_per_sm"] = warps * warp if _whole(warps) and _whole(warp) else None
    for name in _OPTIONAL:
        values.setdefault(name, None)
    for name, value in values.items():
        if name in _OPTIONAL and (value is None or value == 0):
            values[name] = None
        elif not _whole(value) or value < (0 if name == "minor" else 1):
            return None
    device = Device(**values)
    return device if device.arch is not None else None


def kernel_columns(
    cols: Mapping[str, Col], n: int, devices: Devices, at: I64 | None = None, total: int = 0
) -> dict[str, pa.Array]:
    """``theoretical_occupancy_pct``, ``est_occupancy_pct`` and ``occupancy_limiter`` of ``n``
    kernels, from their columns ``cols`` (absent ones: null), and, where ``cols`` has Kineto's own
    figure (``occupancy_pct``), ``occupancy_vs_kineto``. Nothing when no device is known. With
    ``at``, the kernels are those rows of ``total`` rows, and the columns have ``total`` rows."""
    if not (devices.by_id or devices.every):
        return {}
    v = {name: _ints(cols.get(name), n) for name in _CONFIG}
    threads = v["block_x"] * v["block_y"] * v["block_z"]
    grid_known = (v["grid_x"] >= 0) & (v["grid_y"] >= 0) & (v["grid_z"] >= 0)
    blocks = np.where(grid_known, v["grid_x"] * v["grid_y"] * v["grid_z"], -1)
    device_list, device_at = devices.lookup(v["device"])
    regs, smem = v["registers_per_thread"], v["shared_memory_bytes"]
    known = (v["block_x"] >= 0) & (v["block_y"] >= 0) & (v["block_z"] >= 0) & (threads > 0)
    rows = np.flatnonzero(known & (regs >= 0) & (smem >= 0) & (device_at >= 0))
    result = _per_config(device_list, *(x[rows] for x in (device_at, threads, regs, smem, blocks)))
    if at is not None:
        n, rows = total, at[rows]
    out = _arrays(n, rows, result)
    if "occupancy_pct" in cols:
        kineto = _floats(cols["occupancy_pct"])
        out[VS_KINETO] = _vs_kineto(n, rows, result, kineto if at is None else _spread(kineto, n, at, np.nan))
    return out


def _ints(col: Col | None, n: int) -> I64:
    """int64 numpy of ``col``, -1 for null or absent."""
    return to_numpy(col) if col is not None else np.full(n, -1, dtype=np.int64)


def _floats(col: Col) -> npt.NDArray[np.float64]:
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    return np.asarray(arr.cast(pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False), dtype=np.float64)


def _per_config(device_list: list[Device], device_at: I64, threads: I64, regs: I64, smem: I64, blocks: I64) -> Result:
    """The calculator (:func:`fit`) once per distinct (device, block size, registers, shared
    memory); the grid's share (:func:`occupancy`) per kernel."""
    n = len(threads)
    parts = [np.full(n, np.nan) for _ in range(4)] + [np.full(n, -1, dtype=np.int64)]
    config, first = first_codes(_config_ids(device_at, threads, regs, smem))
    for d in np.unique(device_at[first]):
        device = device_list[int(d)]
        mine = np.flatnonzero(device_at[first] == d)  # this device's distinct configurations
        f = fit(device, threads[first[mine]], regs[first[mine]], smem[first[mine]])
        where = np.full(len(first), -1, dtype=np.int64)
        where[mine] = np.arange(len(mine))
        rows = np.flatnonzero(device_at == d)
        pick = where[config[rows]]
        r = occupancy(device, Fit(f.active[pick], f.kineto_active[pick], f.binds[pick]), threads[rows], blocks[rows])
        for part, got in zip(
            parts, (r.theoretical_pct, r.est_pct, r.est_as_kineto, r.kineto_pct, r.limiter), strict=True
        ):
            part[rows] = got
    return Result(*parts)


def _config_ids(*columns: I64) -> I64:
    """One id per row, equal where the rows' values are: the values packed into one int64 where
    they fit its bits (always, for a real launch), else the rank of the row among the distinct rows."""
    bits = (16, 11, 9, 22)  # device index, threads (max 1,024), registers (max 256), shared memory (< 4 MiB)
    if all(len(c) == 0 or (c.min() >= 0 and c.max() < 1 << b) for c, b in zip(columns, bits, strict=True)):
        key = np.zeros(len(columns[0]), dtype=np.int64)
        for c, b in zip(columns, bits, strict=True):
            key = (key << b) | c
        return key
    return np.unique(np.stack(columns, axis=1), axis=0, return_inverse=True)[1].reshape(-1)


def _spread(values: npt.NDArray[Any], n: int, idx: I64, fill: float) -> npt.NDArray[Any]:
    """``n`` values: ``values`` at rows ``idx``, ``fill`` elsewhere."""
    out = np.full(n, fill, dtype=values.dtype)
    out[idx] = values
    return out


def _arrays(n: int, idx: I64, r: Result) -> dict[str, pa.Array]:
    theoretical, est = _spread(r.theoretical_pct, n, idx, np.nan), _spread(r.est_pct, n, idx, np.nan)
    return {
        THEORETICAL: pa.array(theoretical, mask=np.isnan(theoretical)),
        EST: pa.array(est, mask=np.isnan(est)),
        LIMITER: from_codes(_spread(r.limiter, n, idx, -1), LIMITERS),
    }


def _vs_kineto(n: int, idx: I64, r: Result, kineto: npt.NDArray[np.float64]) -> pa.Array:
    """Where Kineto's figure is not ours (as Kineto would write ours): because it assumed no opt-in
    (its own call of the calculator gives its figure), or for a reason the calculator does not show."""
    written = kineto[idx]
    ours = ~np.isnan(r.est_as_kineto) & ~np.isnan(written)
    differs = ours & (r.est_as_kineto != written)
    explained = differs & (r.kineto_pct == written)
    codes = np.full(n, -1, dtype=np.int64)
    codes[idx] = np.where(explained, 0, np.where(differs, 1, -1))
    return from_codes(codes, [KINETO_NO_OPT_IN, KINETO_OTHER])


def kernel_rows(kind: Col) -> Bools:
    """Rows of kind ``kernel`` (one comparison of dictionary codes where the column is encoded)."""
    arr = kind.combine_chunks() if isinstance(kind, pa.ChunkedArray) else kind
    if not pa.types.is_dictionary(arr.type):
        return text_is(arr, "kernel")
    hits = [i for i, v in enumerate(arr.dictionary.to_pylist()) if v == "kernel"]
    codes = np.asarray(arr.indices.fill_null(-1).to_numpy(zero_copy_only=False))
    return np.isin(codes, hits) if len(hits) != 1 else codes == hits[0]


def with_occupancy(table: pa.Table, devices: Devices) -> pa.Table:
    """``table`` (in the unified schema) with the occupancy columns of its kernel rows filled."""
    if not (devices.by_id or devices.every):
        return table
    kernels = np.flatnonzero(kernel_rows(table["kind"]))
    if not len(kernels):
        return table
    sub = table.select([*_CONFIG, "occupancy_pct"]).take(pa.array(kernels))  # the few rows computed on
    cols = {name: sub[name] for name in sub.column_names}
    for name, arr in kernel_columns(cols, sub.num_rows, devices, kernels, table.num_rows).items():
        table = table.set_column(table.schema.get_field_index(name), name, arr)
    return table
