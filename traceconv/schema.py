"""The unified event schema: the one place that names, types and documents every column.

Every reader returns a ``pyarrow.Table`` with exactly these columns, in this order.
Everything downstream (Parquet files, ``read_unified``, analyses, the table of docs/schema.md) is
derived from :data:`COLUMNS`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

SCHEMA_VERSION = "2"
# Versions whose files this traceconv reads. v2 added the columns of ADDED_IN_2 and the kind
# `metric`; a v1 file reads as v2 with those columns null (it has no metric rows).
READABLE_VERSIONS = ("1", "2")
# Parquet key-value metadata keys written by traceconv (values are UTF-8 JSON or text).
META_SCHEMA_VERSION = b"traceconv.schema_version"
META_SOURCE = b"traceconv.source"
META_TRACE = b"traceconv.trace"  # JSON: trace-level metadata of the input
META_TIME_BASE = b"traceconv.time_base"  # "unix_epoch" or "relative"
META_STATS = b"traceconv.stats"  # JSON: counts per kind, notes, dropped figures

DICT = pa.dictionary(pa.int32(), pa.string())

# The values of the ``kind`` column. A new kind adds a value, not a column: files of this
# schema version stay readable both ways. Renaming or removing one needs a new SCHEMA_VERSION.
KINDS = (
    "kernel",
    "memcpy",
    "memset",
    "cuda_api",
    "nvtx",
    "cpu_op",
    "python",
    "sync",
    "memory",
    "marker",
    "overhead",
    "other",
    "metric",
    "graph",
)
GPU_KINDS = ("kernel", "memcpy", "memset")
COPY_KINDS = ("HtoD", "DtoH", "DtoD", "HtoH", "PtoP")


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    unit: str
    meaning: str
    sources: str  # which inputs fill it: "both", "pytorch", "nsys"


_C = Column
COLUMNS: tuple[Column, ...] = (
    # identity
    _C("source", DICT, "", "input format: `pytorch` or `nsys`", "both"),
    _C("trace_id", DICT, "", "the input file's stem (or the trace's own id)", "both"),
    _C("rank", pa.int32(), "", "distributed rank; null when the trace does not say", "both"),
    _C("event_id", pa.int64(), "", "row number within this trace, 0-based; target of *_event_id links", "both"),
    _C("kind", DICT, "", "one of: " + ", ".join(KINDS), "both"),
    _C("category", DICT, "", "original category (`cat`) or nsys table name", "both"),
    _C("phase", DICT, "", "Chrome trace phase (`X`, `i`, `s`, `f`, `M`, `C`); nsys: `X` or `i`", "both"),
    _C("name", DICT, "", "event name; kernels: demangled name", "both"),
    _C("short_name", DICT, "", "kernel short name (nsys `shortName`)", "nsys"),
    # time
    _C("start_ns", pa.int64(), "ns", "start; Unix epoch when `time_base` metadata is `unix_epoch`", "both"),
    _C("end_ns", pa.int64(), "ns", "end (= start for instants; null for ranges that never end)", "both"),
    _C("dur_ns", pa.int64(), "ns", "end_ns - start_ns (execution time for GPU rows)", "both"),
    # where
    _C("pid", pa.int64(), "", "process id (GPU rows in PyTorch traces: the device)", "both"),
    _C("tid", pa.int64(), "", "thread id (GPU rows in PyTorch traces: the stream)", "both"),
    _C("pid_label", DICT, "", "pid as written when it is not an integer (`Spans`, `Traces`)", "pytorch"),
    _C("tid_label", DICT, "", "tid as written when it is not an integer (`stream 7`)", "pytorch"),
    _C("process_name", DICT, "", "process name from trace metadata", "both"),
    _C("thread_name", DICT, "", "thread name from trace metadata", "both"),
    _C("device", pa.int32(), "", "GPU device id (GPU rows)", "both"),
    _C("context", pa.int64(), "", "CUDA context id (GPU rows)", "both"),
    _C("stream", pa.int64(), "", "CUDA stream id (GPU rows)", "both"),
    # links
    _C("correlation_id", pa.int64(), "", "CUPTI correlation id joining an API call to its GPU work", "both"),
    _C("external_id", pa.int64(), "", "PyTorch `External id` as written", "pytorch"),
    _C("flow_id", pa.int64(), "", "flow id of `s`/`f` events", "pytorch"),
    _C("launch_event_id", pa.int64(), "", "GPU rows: event_id of the API call that launched it", "both"),
    _C("launch_name", DICT, "", "GPU rows: name of the launching API call", "both"),
    _C("launch_start_ns", pa.int64(), "ns", "GPU rows: start of the launching API call", "both"),
    _C("launch_end_ns", pa.int64(), "ns", "GPU rows: end of the launching API call", "both"),
    _C("launch_tid", pa.int64(), "", "GPU rows: thread of the launching API call", "both"),
    _C("queue_ns", pa.int64(), "ns", "GPU rows: start_ns - launch_end_ns when >= 0, else null", "both"),
    _C("wall_ns", pa.int64(), "ns", "GPU rows: max(launch_end_ns, end_ns) - launch_start_ns", "both"),
    _C(
        "op_event_id",
        pa.int64(),
        "",
        "GPU and API rows: event_id of the CPU operator (or NVTX range) it came from",
        "both",
    ),
    _C("op_name", DICT, "", "GPU and API rows: name of that operator", "both"),
    _C("graph_id", pa.int64(), "", "CUDA graph id", "nsys"),
    _C("graph_node_id", pa.int64(), "", "CUDA graph node id", "nsys"),
    # GPU detail
    _C("grid_x", pa.int32(), "", "grid dimension x", "both"),
    _C("grid_y", pa.int32(), "", "grid dimension y", "both"),
    _C("grid_z", pa.int32(), "", "grid dimension z", "both"),
    _C("block_x", pa.int32(), "", "block dimension x", "both"),
    _C("block_y", pa.int32(), "", "block dimension y", "both"),
    _C("block_z", pa.int32(), "", "block dimension z", "both"),
    _C("registers_per_thread", pa.int32(), "", "registers per thread", "both"),
    _C("shared_memory_bytes", pa.int64(), "bytes", "shared memory per block (static + dynamic)", "both"),
    _C("static_shared_memory_bytes", pa.int64(), "bytes", "static shared memory per block", "nsys"),
    _C("dynamic_shared_memory_bytes", pa.int64(), "bytes", "dynamic shared memory per block", "nsys"),
    _C("blocks_per_sm", pa.float64(), "", "blocks per SM", "pytorch"),
    _C("warps_per_sm", pa.float64(), "", "warps per SM (null when written as `inf`)", "pytorch"),
    _C("occupancy_pct", pa.float64(), "%", "estimated achieved (older: theoretical) occupancy", "pytorch"),
    _C(
        "theoretical_occupancy_pct",
        pa.float64(),
        "%",
        "kernels: warps of the blocks that fit on one SM at once over its warp slots (CUDA's occupancy"
        " calculator on the launch configuration and the device's limits, opt-in shared memory honoured)",
        "both",
    ),
    _C(
        "est_occupancy_pct",
        pa.float64(),
        "%",
        "kernels: Kineto's `est. achieved occupancy %` (those blocks, no more than grid / SMs, in threads over"
        " the SM's thread slots) with the opt-in shared memory the kernel used, unrounded (Kineto: whole percents)",
        "both",
    ),
    _C(
        "occupancy_limiter",
        DICT,
        "",
        "kernels: what binds the estimate: `registers`, `shared_memory`, `block_size` (warp slots),"
        " `blocks` (blocks per SM), `grid` (too few blocks for the SMs)",
        "both",
    ),
    _C(
        "occupancy_vs_kineto",
        DICT,
        "",
        "kernels: why Kineto's `occupancy_pct` is not `est_occupancy_pct` rounded as Kineto rounds:"
        " `kineto assumes no opt-in shared memory` (it writes 0 over 48 KB a block); null where they agree",
        "pytorch",
    ),
    _C("bytes", pa.int64(), "bytes", "memcpy/memset size; memory rows: allocation (+) or free (-)", "both"),
    _C("copy_kind", DICT, "", "copy direction: HtoD, DtoH, DtoD, HtoH, PtoP, UVM ..., Unknown", "both"),
    _C("src_kind", DICT, "", "source memory kind (Pageable, Pinned, Device, Managed ...)", "both"),
    _C("dst_kind", DICT, "", "destination memory kind; memset: the memory kind", "both"),
    _C("bandwidth_gbps", pa.float64(), "GB/s", "bytes / dur_ns for memcpy/memset", "both"),
    _C("src_device", pa.int32(), "", "peer copies: source device", "both"),
    _C("dst_device", pa.int32(), "", "peer copies: destination device", "both"),
    # memory (allocator events)
    _C("total_allocated_bytes", pa.int64(), "bytes", "memory rows: allocated after this event", "both"),
    _C("total_reserved_bytes", pa.int64(), "bytes", "memory rows: reserved after this event", "pytorch"),
    # NVTX / API detail
    _C("domain", DICT, "", "NVTX domain name", "nsys"),
    _C("api_class", DICT, "", "cuda_api rows: `runtime` or `driver`", "both"),
    _C("sync_type", DICT, "", "sync rows: event, stream_wait_event, stream, context", "nsys"),
    _C("return_value", pa.int64(), "", "API return code", "nsys"),
    # GPU metrics samples
    _C("value", pa.float64(), "", "metric rows: the sample's value", "nsys"),
    _C("unit", DICT, "", "metric rows: the value's unit, e.g. %", "nsys"),
    # nothing lost
    _C("args", pa.string(), "", "JSON text of every argument of the event (including those with a column)", "both"),
)

NAMES: tuple[str, ...] = tuple(c.name for c in COLUMNS)
ADDED_IN_2 = (
    *("theoretical_occupancy_pct", "est_occupancy_pct", "occupancy_limiter", "occupancy_vs_kineto"),
    *("value", "unit"),
)
BY_NAME: dict[str, Column] = {c.name: c for c in COLUMNS}
SCHEMA: pa.Schema = pa.schema([pa.field(c.name, c.type, nullable=True) for c in COLUMNS])


def empty_table() -> pa.Table:
    return SCHEMA.empty_table()


def one_table(tables: Sequence[pa.Table]) -> pa.Table:
    """Tables of one schema as one, each dictionary column under one dictionary.

    Every row group, batch or file has dictionaries of its own, and pyarrow's joins and
    group-bys refuse chunks whose dictionaries differ ("Unifying differing dictionaries"):
    a table handed out to be computed on has its dictionaries unified here, once.
    """
    return pa.concat_tables(tables).unify_dictionaries()


def present(columns: dict[str, pa.Array | pa.ChunkedArray], num_rows: int) -> pa.Table:
    """The columns that hold a value in some row, cast to their types, in schema order: a
    table part of the way to :func:`conform` (which restores the rest as nulls), for tables
    that wait for pass 2 (most of the columns are null in most rows).

    Raises ``KeyError`` for a column the schema does not know, as :func:`conform` does.
    """
    unknown = set(columns) - set(NAMES)
    if unknown:
        raise KeyError(f"columns not in the unified schema: {sorted(unknown)}")
    names, arrays = [], []
    for col in COLUMNS:
        arr = columns.get(col.name)
        if arr is None or (num_rows and arr.null_count == num_rows):
            continue
        names.append(col.name)
        arrays.append(arr if arr.type == col.type else arr.cast(col.type))
    return pa.Table.from_arrays(arrays, names=names)


def conform(columns: dict[str, pa.Array | pa.ChunkedArray], num_rows: int) -> pa.Table:
    """Build a table in the unified schema: missing columns become nulls, types are cast.

    Raises ``KeyError`` for a column the schema does not know, so a typo in a reader
    fails loudly instead of silently dropping data.
    """
    unknown = set(columns) - set(NAMES)
    if unknown:
        raise KeyError(f"columns not in the unified schema: {sorted(unknown)}")
    arrays = []
    zeros: pa.Buffer | None = None
    for col in COLUMNS:
        arr = columns.get(col.name)
        if arr is None:
            if zeros is None:
                zeros = pa.py_buffer(bytes(8 * (num_rows + 1)))  # 8 bytes a row covers every type's buffers
            arrays.append(_nulls(num_rows, col.type, zeros))
            continue
        if arr.type != col.type:
            arr = arr.cast(col.type)
        arrays.append(arr)
    return pa.Table.from_arrays(arrays, schema=SCHEMA)


def _nulls(n: int, typ: pa.DataType, zeros: pa.Buffer) -> pa.Array:
    """An all-null column whose buffers (validity, values, offsets, indices) are all ``zeros``.

    ``pa.nulls`` allocates and zeroes buffers for each column; most of the schema's columns
    are null in a table of one kind (43 for CUDA API calls), and sharing one buffer saves their
    memory and the time to fault it in.
    """
    if pa.types.is_dictionary(typ):
        return pa.DictionaryArray.from_buffers(
            typ, n, [zeros, zeros], dictionary=pa.nulls(0, typ.value_type), null_count=n
        )
    buffers = [zeros, zeros, zeros] if typ == pa.string() else [zeros, zeros]
    return pa.Array.from_buffers(typ, n, buffers, null_count=n)


def markdown_table() -> str:
    """The schema table of docs/schema.md, generated so that it cannot drift from the code."""
    lines = ["| column | Arrow type | unit | meaning | filled by |", "|---|---|---|---|---|"]
    for c in COLUMNS:
        typ = "dictionary<int32, string>" if c.type == DICT else str(c.type)
        lines.append(f"| `{c.name}` | {typ} | {c.unit} | {c.meaning} | {c.sources} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown_table())
