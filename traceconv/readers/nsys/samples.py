"""Sampled tables: GPU metrics (kind ``metric``) and CUDA memory usage (kind ``memory``).

``GPU_METRICS`` (``nsys profile --gpu-metrics-devices``): one row per sample and metric, at
10-200 kHz the largest table of an export. Each becomes an instant of kind ``metric``:
``name`` is the metric's name from ``TARGET_INFO_GPU_METRICS`` (joined on ``typeId`` and
``metricId``, as NVIDIA's recipes join them: metric ids are numbered per type and change
between versions and GPUs), ``unit`` the unit in its brackets (``[Throughput %]`` -> ``%``,
``[MHz]``), ``value`` the value in that unit: as written, except the clocks, which nsys 2025.3
names ``[MHz]`` and writes in Hz (1,979,390,672 for a 1,979 MHz clock; see :data:`HZ`). The
``[Avg]`` metrics (``Compute Warps in Flight [Avg]``) are kept as written: each is the sum of
warps over the sample's cycles, which 2025.3.1 wraps at 24 bits, not an average (the same
metric ``[Avg Warps per Cycle]`` is that sum per cycle). ``device`` the GPU in the low byte of ``typeId``
(``<hardware:8><VM:8><source:16><tag:24><GPU:8>``) as CUDA numbers it (``TARGET_INFO_GPU``'s
``cuDevice``, where the export has it). Seen in 2025.3.1 and 2025.3.2 exports; an info table
without ``typeId`` is joined on ``metricId`` alone, and a metric it does not name is ``metric N``.

``CUDA_GPU_MEMORY_USAGE_EVENTS`` (``--cuda-memory-usage=true``): each allocation and free on
a device becomes an instant of kind ``memory``, like PyTorch's allocator events: ``bytes`` is
positive for an allocation and negative for a free, ``total_allocated_bytes`` the device's
running sum in event order (from the start of the capture: memory allocated before it is not
in the sum), and the rest of the row (address, memory kind, operation, variable name, pool
figures) goes into ``args``.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traceconv.readers.arrow_util import I64
from traceconv.readers.nsys.enums import Enums, labelled
from traceconv.readers.nsys.parts import (
    NONE,
    Col,
    DictCol,
    Part,
    arrow,
    column,
    constant,
    decode_pid,
    dictionary,
    ints,
    json_args,
    leftover,
    times,
)
from traceconv.readers.nsys.sql import Database
from traceconv.readers.sorted_keys import lookup

METRICS = "GPU_METRICS"
METRIC_INFO = "TARGET_INFO_GPU_METRICS"
MEMORY = "CUDA_GPU_MEMORY_USAGE_EVENTS"
_UNIT = re.compile(r"\[(?:Throughput )?([^\]]*)\]\s*$")
_MEMORY_USED = frozenset({"start", "globalPid", "deviceId", "contextId", "streamId", "correlationId", "bytes"})
MEMORY_TEXTS = frozenset({"name"})  # the variable's name, when the allocation has one


# No GPU clock reaches 100 GHz: a "[MHz]" value above this was written in Hz.
HZ = 100_000.0


def unit_of(name: str) -> str | None:
    """``SMs Active [Throughput %]`` -> ``%``; ``GPC Clock Frequency [MHz]`` -> ``MHz``; no brackets: None."""
    m = _UNIT.search(name)
    return m.group(1) if m else None


class MetricNames:
    """The export's metrics: (type, metric id) -> name and unit, and GPU ids -> CUDA devices."""

    def __init__(self, db: Database) -> None:
        info = db.read(METRIC_INFO, ["typeId", "metricId", "metricName"])
        self.by_type = "typeId" in info.column_names
        self.types = np.unique(ints(info, "typeId"))
        self.keys = self._key(ints(info, "typeId"), ints(info, "metricId"))
        name = column(info, "metricName")
        self.names: list[str | None] = name.to_pylist() if name is not None else [None] * info.num_rows
        gpus = db.read("TARGET_INFO_GPU", ["id", "cuDevice"])
        ids, cuda = ints(gpus, "id"), ints(gpus, "cuDevice")
        self.gpu_ids, self.cuda = ids[(ids >= 0) & (cuda >= 0)], cuda[(ids >= 0) & (cuda >= 0)]

    def _key(self, type_id: I64, metric: I64) -> I64:
        """(type's code << 32) | metric id; -1 for a type the info table does not have or an id past 32 bits."""
        ok = (metric >= 0) & (metric < (1 << 32))
        if not self.by_type:
            return np.where(ok, metric, -1)
        at = np.minimum(np.searchsorted(self.types, type_id), max(len(self.types) - 1, 0))
        known = ok & (self.types[at] == type_id) if len(self.types) else np.zeros(len(metric), dtype=bool)
        return np.where(known, (at.astype(np.int64) << 32) | np.maximum(metric, 0), -1)

    def columns(self, type_id: I64, metric: I64) -> tuple[DictCol, DictCol]:
        """(name, unit) of each sample."""
        pos = lookup(self._key(type_id, metric), np.where(self.keys >= 0, self.keys, -2))
        distinct = np.unique(metric[pos < 0]).tolist()
        labels = [*self.names, *(f"metric {m}" for m in distinct)]
        codes = np.where(pos >= 0, pos, len(self.names) + np.searchsorted(distinct, metric)).astype(np.int64)
        valid = np.ones(len(labels), dtype=bool)
        units = [unit_of(v) if v is not None else None for v in labels]
        return dictionary(codes, labels, valid), dictionary(codes, units, np.array([u is not None for u in units]))

    def devices(self, type_id: I64) -> Col:
        gpu = np.where(type_id >= 0, type_id & 0xFF, NONE)
        at = lookup(gpu, self.gpu_ids)
        device = np.where(at >= 0, self.cuda[np.maximum(at, 0)] if len(self.cuda) else 0, gpu)
        return arrow(device.astype(np.int32), gpu < 0)


def metrics(t: pa.Table, names: MetricNames) -> Part:
    n = t.num_rows
    at = times(t, "timestamp")
    type_id, metric = ints(t, "typeId"), ints(t, "metricId")
    name, unit = names.columns(type_id, metric)
    value = column(t, "value")
    cols: dict[str, Col] = {
        "kind": constant(n, "metric"),
        "category": constant(n, METRICS),
        "phase": constant(n, "i"),
        "name": name,
        "unit": unit,
        "device": names.devices(type_id),
        "value": _in_unit(value.cast(pa.float64()), unit) if value is not None else pa.nulls(n, pa.float64()),
    }
    none = np.full(n, NONE, dtype=np.int64)
    return Part(METRICS, cols, at, at.copy(), none, none.copy(), none.copy())


def _in_unit(value: pa.Array, unit: DictCol) -> pa.Array:
    """Values in their unit: a clock written in Hz under a "[MHz]" name, in MHz (see :data:`HZ`)."""
    hz = pa.array(_is(unit, "MHz")) if "MHz" in unit.dictionary.to_pylist() else None
    if hz is None:
        return value
    hz = pc.and_(hz, pc.greater_equal(value, HZ))
    return pc.if_else(hz, pc.divide(value, 1e6), value)


def memory_columns(db: Database) -> list[str]:
    have = db.columns(MEMORY)
    return [c for c, typ in have.items() if typ != "TEXT" or c in MEMORY_TEXTS]


class Totals:
    """Each device's allocated bytes so far, carried from one batch of memory rows to the next."""

    def __init__(self) -> None:
        self.by_device: dict[int, int] = {}

    def running(self, device: I64, signed: I64) -> I64:
        out = np.zeros(len(device), dtype=np.int64)
        for d in np.unique(device).tolist():
            rows = np.flatnonzero(device == d)
            sums = np.cumsum(signed[rows]) + self.by_device.get(d, 0)
            out[rows] = sums
            self.by_device[d] = int(sums[-1])
        return out


def memory(t: pa.Table, enums: Enums, totals: Totals) -> Part:
    n = t.num_rows
    at = times(t, "start")
    gpid = ints(t, "globalPid")
    gpid = np.where(gpid >= 0, gpid, NONE)
    operation = labelled(column(t, "memoryOperationType") or pa.nulls(n, pa.int64()), enums.memory_operation)
    freed = _is(operation, "Deallocation")
    size = ints(t, "bytes")
    signed = np.where(freed, -size, size)
    device = ints(t, "deviceId")
    cols: dict[str, Col] = {
        "kind": constant(n, "memory"),
        "category": constant(n, MEMORY),
        "phase": constant(n, "i"),
        "name": pc.dictionary_encode(
            pc.binary_join_element_wise("CUDA memory ", pc.utf8_lower(operation.cast(pa.string())), "")
        ),
        "pid": decode_pid(gpid),
        "bytes": arrow(signed, size < 0),
        "total_allocated_bytes": arrow(totals.running(device, np.where(size >= 0, signed, 0)), device < 0),
    }
    for src, dst in (
        ("deviceId", "device"),
        ("contextId", "context"),
        ("streamId", "stream"),
        ("correlationId", "correlation_id"),
    ):
        if (col := column(t, src)) is not None:
            cols[dst] = col
    labels: dict[str, DictCol] = {"memoryOperationType": operation}
    if (kind := column(t, "memKind")) is not None:
        labels["memKind"] = labelled(kind, enums.memory)
    if (var := column(t, "name")) is not None:
        labels["name"] = pc.dictionary_encode(var)
    args = json_args(t, leftover(t, _MEMORY_USED | {"memKind", "memoryOperationType", "name"}), labels)
    if args is not None:
        cols["args"] = args
    none = np.full(n, NONE, dtype=np.int64)
    return Part(MEMORY, cols, at, at.copy(), none, gpid, ints(t, "correlationId"))


def _is(arr: DictCol, label: str) -> np.ndarray:
    values = arr.dictionary.to_pylist()
    hit = np.array([v == label for v in values] + [False], dtype=bool)
    return hit[np.asarray(arr.indices.fill_null(len(values)), dtype=np.int64)]
