"""CUPTI tables of an Nsight Systems export -> :class:`Part` s in unified columns.

Each reader selects the columns it maps by name (absent ones stay null) and puts every other
numeric column of the row into ``args``, so that nothing of a row is lost, including columns
that later Nsight Systems versions add.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traceconv.readers.arrow_util import I64, from_codes
from traceconv.readers.nsys.enums import SYNC_NAMES, Enums, labelled
from traceconv.readers.nsys.parts import (
    NO_TIME,
    NONE,
    STRING_ID_COLUMNS,
    Col,
    DictCol,
    Part,
    Strings,
    api_name,
    arrow,
    as_dict,
    column,
    constant,
    decode_pid,
    decode_tid,
    global_pid,
    ints,
    join_texts,
    json_args,
    leftover,
    times,
)
from traceconv.readers.nsys.sql import Database
from traceconv.readers.occupancy_columns import Devices, kernel_columns

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
GRAPH = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
CUDA_EVENT = "CUPTI_ACTIVITY_KIND_CUDA_EVENT"
OSRT = "OSRT_API"
OVERHEAD = "PROFILER_OVERHEAD"
SKIPPED = frozenset({"callchainId", "gridId"})  # ids of tables not converted; a per-launch counter
_DEVICE = {
    "deviceId": "device",
    "contextId": "context",
    "streamId": "stream",
    "correlationId": "correlation_id",
    "graphNodeId": "graph_node_id",
    "graphId": "graph_id",
}
_KERNEL = {
    "gridX": "grid_x",
    "gridY": "grid_y",
    "gridZ": "grid_z",
    "blockX": "block_x",
    "blockY": "block_y",
    "blockZ": "block_z",
    "registersPerThread": "registers_per_thread",
    "staticSharedMemory": "static_shared_memory_bytes",
    "dynamicSharedMemory": "dynamic_shared_memory_bytes",
}
_COMMON = frozenset({"start", "end", "globalPid", "globalTid"})


def wanted_columns(db: Database, table: str, names: frozenset[str]) -> list[str]:
    """The numeric columns of ``table``, and the text or string-id columns in ``names``."""
    have = db.columns(table)
    # Text columns and string ids are read only when mapped: args hold numbers only.
    return [
        c
        for c, typ in have.items()
        if c not in SKIPPED and ((c not in STRING_ID_COLUMNS and typ != "TEXT") or c in names)
    ]


def read_columns(db: Database, table: str, names: frozenset[str]) -> pa.Table:
    """Every row of :func:`wanted_columns`."""
    return db.read(table, wanted_columns(db, table, names))


def _renamed(t: pa.Table, mapping: dict[str, str]) -> dict[str, Col]:
    out = {}
    for src, dst in mapping.items():
        col = column(t, src)
        if col is not None:
            out[dst] = col
    return out


def _gpu(t: pa.Table, table: str, kind: str, used: frozenset[str]) -> Part:
    n = t.num_rows
    cols = _renamed(t, _DEVICE)
    gpid = ints(t, "globalPid")
    cols.update(kind=constant(n, kind), category=constant(n, table), phase=constant(n, "X"), pid=decode_pid(gpid))
    args = json_args(t, leftover(t, used | _COMMON | set(_DEVICE)))
    if args is not None:
        cols["args"] = args
    return Part(
        table,
        cols,
        times(t, "start"),
        times(t, "end"),
        np.full(n, NONE, dtype=np.int64),
        gpid,
        ints(t, "correlationId"),
    )


KERNEL_USED = frozenset({"demangledName", "shortName", *_KERNEL})


def kernels(t: pa.Table, strings: Strings, devices: Devices) -> Part:
    used = KERNEL_USED
    part = _gpu(t, KERNEL, "kernel", used)
    demangled, short = ints(t, "demangledName"), ints(t, "shortName")
    part.cols["name"] = strings.names(np.where(demangled >= 0, demangled, short))
    part.cols["short_name"] = strings.names(short)
    part.cols.update(_renamed(t, _KERNEL))
    static, dynamic = column(t, "staticSharedMemory"), column(t, "dynamicSharedMemory")
    if static is not None and dynamic is not None:
        part.cols["shared_memory_bytes"] = pc.add(static, dynamic)
    part.cols.update(kernel_columns(part.cols, part.n, devices))
    return part


def _sizes(t: pa.Table, cols: dict[str, Col]) -> None:
    """``bytes`` and ``bandwidth_gbps`` (bytes per nanosecond are GB/s)."""
    if "bytes" not in t.column_names:
        return
    size, start, end = ints(t, "bytes"), times(t, "start"), times(t, "end")
    dur = np.where((end != NO_TIME) & (start != NO_TIME), end - start, 0)
    ok = (size >= 0) & (dur > 0)
    cols["bytes"] = arrow(size, size < 0)
    cols["bandwidth_gbps"] = arrow(np.where(ok, size / np.maximum(dur, 1), 0.0), ~ok)


def _put(cols: dict[str, Col], pairs: dict[str, Col | None]) -> None:
    cols.update({k: v for k, v in pairs.items() if v is not None})


def _label(t: pa.Table, name: str, labels: dict[int, str]) -> DictCol | None:
    col = column(t, name)
    return labelled(col, labels) if col is not None else None


def _text(arr: Col | None, n: int) -> Col:
    return arr.cast(pa.string()) if arr is not None else pa.nulls(n, pa.string())


BATCHED_COPIES = (
    "{:,} memcpy rows stand for several copies each (`copyCount` > 1 in args, "
    "Nsight Systems 2025.3+): count them with copyCount, not as one copy"
)
MEMCPY_USED = frozenset({"bytes", "copyKind", "srcKind", "dstKind", "srcDeviceId", "dstDeviceId"})


def memcpys(t: pa.Table, enums: Enums) -> Part:
    used = MEMCPY_USED
    part = _gpu(t, MEMCPY, "memcpy", used)
    n = t.num_rows
    copy, src, dst = (
        _label(t, c, m) for c, m in (("copyKind", enums.copy), ("srcKind", enums.memory), ("dstKind", enums.memory))
    )
    name = join_texts("Memcpy ", _text(copy, n), " (", _text(src, n), " -> ", _text(dst, n), ")", null="?")
    part.cols["name"] = pc.dictionary_encode(name)
    _sizes(t, part.cols)
    _put(
        part.cols,
        {
            "src_device": column(t, "srcDeviceId"),
            "dst_device": column(t, "dstDeviceId"),
            "copy_kind": copy,
            "src_kind": src,
            "dst_kind": dst,
        },
    )
    batched = int((ints(t, "copyCount") > 1).sum())
    if batched:
        part.tallies[BATCHED_COPIES] = batched
    return part


MEMSET_USED = frozenset({"bytes", "memKind"})


def memsets(t: pa.Table, enums: Enums) -> Part:
    used = MEMSET_USED
    part = _gpu(t, MEMSET, "memset", used)
    kind = _label(t, "memKind", enums.memory)
    part.cols["name"] = pc.dictionary_encode(join_texts("Memset (", _text(kind, t.num_rows), ")", null="?"))
    _sizes(t, part.cols)
    _put(part.cols, {"dst_kind": kind})
    return part


def syncs(t: pa.Table, enums: Enums) -> Part:
    """Synchronisation records; ``syncType`` stays in args (see :func:`sync_types` for why)."""
    part = _gpu(t, SYNC, "sync", frozenset())
    kind = _label(t, "syncType", enums.sync)
    part.cols["sync_type"] = kind if kind is not None else pa.nulls(t.num_rows, pa.dictionary(pa.int32(), pa.string()))
    return part


def sync_types(coded: Col, launch_name: Col | None) -> tuple[Col, Col, int]:
    """(sync_type, name, rows whose code contradicts their call) of synchronisation rows.

    Several Nsight Systems versions write ``syncType`` codes that contradict their own
    ``ENUM_CUPTI_SYNC_TYPE`` (2025.3.2.0 writes 2, "stream wait event", for every
    ``cudaStreamSynchronize``). An explicit synchronisation call says what it waited for, so
    its kind wins; implicit synchronisation (inside a memcpy, ...) keeps the code's label.
    """
    coded_labels, coded_codes = _codes(coded)
    labels = list(dict.fromkeys([*SYNC_NAMES, *(v for v in coded_labels if v is not None)]))
    coded_idx = np.array([labels.index(v) if v is not None else -1 for v in coded_labels] or [-1], dtype=np.int64)
    by_code = np.where(coded_codes >= 0, coded_idx[np.maximum(coded_codes, 0)], -1)
    by_call = np.full(len(by_code), -1, dtype=np.int64)
    if launch_name is not None:
        call_labels, call_codes = _codes(launch_name)
        call_idx = np.array(
            [labels.index(c) if (c := _sync_call(v)) else -1 for v in call_labels] or [-1], dtype=np.int64
        )
        by_call = np.where(call_codes >= 0, call_idx[np.maximum(call_codes, 0)], -1)
    result = np.where(by_call >= 0, by_call, by_code)
    contradicted = int(((by_call >= 0) & (by_code >= 0) & (by_call != by_code)).sum())
    return from_codes(result, labels), from_codes(result, [SYNC_NAMES.get(v, v) for v in labels]), contradicted


_SYNC_CALLS = (
    ("StreamSynchronize", "stream"),
    ("DeviceSynchronize", "context"),
    ("CtxSynchronize", "context"),
    ("EventSynchronize", "event"),
    ("StreamWaitEvent", "stream_wait_event"),
)


def _sync_call(name: str | None) -> str | None:
    for call, label in _SYNC_CALLS:
        if name is not None and name.startswith(("cuda" + call, "cu" + call)):
            return label
    return None


def _codes(arr: Col) -> tuple[list[str | None], I64]:
    enc = as_dict(arr if pa.types.is_dictionary(arr.type) else pc.dictionary_encode(arr))
    return enc.dictionary.to_pylist(), np.asarray(enc.indices.fill_null(-1), dtype=np.int64)


def graphs(t: pa.Table) -> Part:
    """Whole CUDA graphs traced as one GPU activity (``--cuda-graph-trace=graph``, the default): kind
    ``graph``, named by their graph id (``CUDA graph 12``)."""
    part = _gpu(t, GRAPH, "graph", frozenset())
    ids = ints(t, "graphId")
    distinct, codes = np.unique(ids, return_inverse=True)
    part.cols["name"] = from_codes(codes, [f"CUDA graph {i}" if i != NONE else "CUDA graph" for i in distinct])
    return part


CUDA_EVENT_USED = frozenset({"timestamp"})


def cuda_events(t: pa.Table) -> Part:
    """CUDA event records on a stream (``cudaEventRecord``): kind ``other``, linked to the recording
    call like kernels. Before 2026.2 the table has no time at all: start_ns and end_ns stay null
    rather than borrow the call's time, as the record happens when the stream reaches it (the
    call's times are in launch_*). From 2026.2, ``timestamp`` makes it an instant."""
    used = CUDA_EVENT_USED
    part = _gpu(t, CUDA_EVENT, "other", used)
    n = t.num_rows
    part.cols["name"] = constant(n, "CUDA event record")
    if "start" not in t.column_names:
        part.start = times(t, "timestamp")
        part.end = part.start.copy()
    if "end" not in t.column_names:
        part.cols["phase"] = constant(n, "i")
    return part


API_USED = frozenset({"nameId", "eventClass", "returnValue", "correlationId"})


def apis(t: pa.Table, strings: Strings, table: str) -> Part:
    """CUDA runtime and driver calls (kind ``cuda_api``) or OS runtime calls (kind ``other``)."""
    cuda = table == RUNTIME
    used = API_USED
    name = strings.names(ints(t, "nameId"), api_name if cuda else None)
    part = _on_threads(t, table, "cuda_api" if cuda else "other", name)
    part.cols.update(_renamed(t, {"returnValue": "return_value", "correlationId": "correlation_id"}))
    if cuda:
        part.cols["api_class"] = _api_class(t, name)
        part.corr = ints(t, "correlationId")
    _put(part.cols, {"args": json_args(t, leftover(t, used | _COMMON))})
    return part


OVERHEAD_USED = frozenset({"nameId"})


def overheads(t: pa.Table, strings: Strings) -> Part:
    """Time ranges the profiler spent on a thread of the profiled process (kind ``overhead``): CUPTI
    buffer flushes, instrumentation, ... ``returnValue`` (``overheadType`` from 2026.2, and
    ``correlationId``, always 0, before 2021) goes into args like every unmapped number."""
    used = OVERHEAD_USED
    part = _on_threads(t, OVERHEAD, "overhead", strings.names(ints(t, "nameId")))
    _put(part.cols, {"args": json_args(t, leftover(t, used | _COMMON))})
    return part


def _on_threads(t: pa.Table, table: str, kind: str, name: DictCol) -> Part:
    """Rows of a thread (``globalTid``): pid and tid decoded, no correlation id."""
    n = t.num_rows
    gtid = ints(t, "globalTid")
    cols: dict[str, Col] = {
        "kind": constant(n, kind),
        "category": constant(n, table),
        "phase": constant(n, "X"),
        "name": name,
        "pid": decode_pid(gtid),
        "tid": decode_tid(gtid),
    }
    none = np.full(n, NONE, dtype=np.int64)
    return Part(table, cols, times(t, "start"), times(t, "end"), gtid, global_pid(gtid), none)


def _api_class(t: pa.Table, name: DictCol) -> DictCol:
    """``eventClass`` 0 is the runtime, 1 the driver; without it, the name says (``cuda*`` vs ``cu*``)."""
    by_name = [_class_of(v) for v in name.dictionary.to_pylist()]
    labels = ["runtime", "driver"]
    lut = np.array([labels.index(v) if v else -1 for v in by_name] or [-1], dtype=np.int64)
    codes = np.asarray(name.indices.fill_null(-1), dtype=np.int64)
    guess = np.where(codes >= 0, lut[np.maximum(codes, 0)], -1)
    event_class = ints(t, "eventClass")
    result = np.where((event_class == 0) | (event_class == 1), event_class, guess)
    return as_dict(from_codes(result.astype(np.int64), labels))


def _class_of(name: str | None) -> str | None:
    bare = (name or "").lstrip("_")  # __cudaRegisterFatBinary is the runtime's too
    return "runtime" if bare.startswith("cuda") else "driver" if bare.startswith("cu") else None
