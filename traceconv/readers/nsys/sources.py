"""The tables the reader converts, in event-id order: for each, the columns it reads, the order
of its rows, and its conversion to unified columns (a batch of rows at a time)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa

from traceconv.readers.nsys.diagnostics import DIAGNOSTIC, diagnostic_columns, diagnostics
from traceconv.readers.nsys.enums import Enums
from traceconv.readers.nsys.nvtx import NVTX, Domains, nvtx, nvtx_columns
from traceconv.readers.nsys.parts import Part, Strings
from traceconv.readers.nsys.samples import MEMORY, METRICS, MetricNames, Totals, memory, memory_columns, metrics
from traceconv.readers.nsys.sql import Database
from traceconv.readers.nsys.tables import (
    API_USED,
    CUDA_EVENT,
    CUDA_EVENT_USED,
    GRAPH,
    KERNEL,
    KERNEL_USED,
    MEMCPY,
    MEMCPY_USED,
    MEMSET,
    MEMSET_USED,
    OSRT,
    OVERHEAD,
    OVERHEAD_USED,
    RUNTIME,
    SYNC,
    apis,
    cuda_events,
    graphs,
    kernels,
    memcpys,
    memsets,
    overheads,
    syncs,
    wanted_columns,
)
from traceconv.readers.occupancy_columns import Devices


@dataclass
class Context:
    """What conversions need besides their rows."""

    db: Database
    strings: Strings
    enums: Enums
    domains: Domains
    metrics: MetricNames
    totals: Totals  # memory rows' running sums, carried across batches
    devices: Devices  # the GPUs' limits, for the kernels' occupancy (read once)


@dataclass(frozen=True)
class Source:
    table: str
    columns: Callable[[Database], list[str]]
    convert: Callable[[pa.Table, Context], Part]
    keys: tuple[str, ...] = ("start",)  # the row order: the first of these columns the table has ("rowid": as stored)
    # The conversion of a batch needs the batches before it (running sums): done in order, in the
    # thread that links the rows; the others are converted by the threads that read them.
    ordered: bool = False


def _numbers(table: str, names: frozenset[str]) -> Callable[[Database], list[str]]:
    return lambda db: wanted_columns(db, table, names)


SOURCES = (
    Source(NVTX, nvtx_columns, lambda t, c: nvtx(t, c.strings, c.domains)),
    Source(RUNTIME, _numbers(RUNTIME, API_USED), lambda t, c: apis(t, c.strings, RUNTIME)),
    Source(KERNEL, _numbers(KERNEL, KERNEL_USED), lambda t, c: kernels(t, c.strings, c.devices)),
    Source(MEMCPY, _numbers(MEMCPY, MEMCPY_USED), lambda t, c: memcpys(t, c.enums)),
    Source(MEMSET, _numbers(MEMSET, MEMSET_USED), lambda t, c: memsets(t, c.enums)),
    Source(SYNC, _numbers(SYNC, frozenset()), lambda t, c: syncs(t, c.enums)),
    Source(GRAPH, _numbers(GRAPH, frozenset()), lambda t, c: graphs(t)),
    Source(OSRT, _numbers(OSRT, API_USED), lambda t, c: apis(t, c.strings, OSRT)),
    Source(OVERHEAD, _numbers(OVERHEAD, OVERHEAD_USED), lambda t, c: overheads(t, c.strings)),
    # Before 2026.2 CUDA event records have no time: their stored order is their order.
    Source(
        CUDA_EVENT, _numbers(CUDA_EVENT, CUDA_EVENT_USED), lambda t, c: cuda_events(t), ("start", "timestamp", "rowid")
    ),
    # A few dozen messages, some of whose times are dropped (host clock): read whole.
    Source(DIAGNOSTIC, diagnostic_columns, lambda t, c: diagnostics(t, c.db, c.enums), ()),
    Source(MEMORY, memory_columns, lambda t, c: memory(t, c.enums, c.totals), ordered=True),
    Source(
        METRICS,
        lambda db: ["timestamp", "typeId", "metricId", "value"],
        lambda t, c: metrics(t, c.metrics),
        ("timestamp",),
    ),
)
