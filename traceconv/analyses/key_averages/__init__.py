"""``traceconv ops``: torch's ``key_averages()`` rebuilt from a trace file, and traceconv's own view.

:func:`key_averages` gives the rows ``prof.key_averages()`` returns for the profiling
session that wrote a PyTorch trace (``torch.autograd.profiler_util`` is the specification:
the same events, parent/child rules, memory attribution and quirks), or the same table
from an Nsight Systems export made with ``--pytorch=autograd-nvtx`` (operator ranges).
:func:`operators` gives traceconv's own view of the same events (:mod:`.native`), with
the differences to torch's, column by column.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from traceconv import io, writing
from traceconv import schema as S
from traceconv.analyses import common, inputs
from traceconv.analyses.key_averages import aggregate as A
from traceconv.analyses.key_averages import native as N
from traceconv.analyses.key_averages import pytorch as P
from traceconv.analyses.key_averages.events import MEMORY, Events
from traceconv.analyses.key_averages.results import OpsTable, OpStats
from traceconv.errors import UsageError

INPUT_COLUMNS = tuple(dict.fromkeys(("source", *P.INPUT_COLUMNS)))
KINDS = tuple(dict.fromkeys((*P.KINDS, "other")))  # other: Kineto's profiler span (torch's time origin)
TRACE_KEY = S.META_TRACE


def load(path: str | Path, by_shape: bool = False, stack_n: int = 0) -> pa.Table:
    """The rows and columns :func:`key_averages` reads from any input, with the trace's own
    metadata (its profiler settings). From Parquet, the ``args`` text (most of a trace's
    bytes) is read only where shapes, stacks or FLOPs need it: of operators and annotations."""
    path = Path(path)
    if not (path.is_file() and io.is_parquet(path)):  # a trace, a report, a directory of them or of Parquet files
        table = _whole(path)
        meta = table.schema.metadata
        if not (by_shape or stack_n or session(table).get("with_flops")):  # the operators' FLOPs need some
            work = pc.is_in(table["name"].cast(pa.string()), value_set=pa.array(_flop_ops(), pa.string()))
            kept = pc.if_else(pc.fill_null(work, False), table["args"], pa.nulls(table.num_rows, pa.string()))
            table = table.set_column(table.column_names.index("args"), "args", kept)
        return table.replace_schema_metadata(meta)
    meta = io.trace_metadata(path)["trace"]
    lean = [c for c in INPUT_COLUMNS if c != "args"]
    kind, category = pc.field("kind"), pc.field("category")
    rows = kind.isin([k for k in KINDS if k != "other"]) | ((kind == "other") & (category == "Trace"))
    table = io.read_table(path, columns=lean, filters=rows)
    ops = None if by_shape or stack_n or meta.get("with_flops") else pc.field("name").isin(_flop_ops())
    args = io.read_table(path, kinds=["cpu_op", "nvtx"], columns=["event_id", "args"], filters=ops)
    table = table.join(args, "event_id", join_type="left outer")
    return table.replace_schema_metadata({TRACE_KEY: json.dumps(meta)})


def _whole(path: Path) -> pa.Table:
    """A trace or a report converted in memory with its metadata (the profiler settings), or a
    directory through :func:`common.load` (which keeps no metadata of the traces it concatenates)."""
    if path.is_dir():
        return common.load(path, columns=INPUT_COLUMNS)
    with inputs.salvage_hint(path):
        table = writing.read(path)
    return table.select(list(INPUT_COLUMNS))


def session(table: pa.Table) -> dict[str, Any]:
    """The trace's own metadata (``profile_memory``, ``with_flops`` ...), {} when unknown."""
    raw = (table.schema.metadata or {}).get(TRACE_KEY)
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def key_averages(table: pa.Table, by_shape: bool = False, stack_n: int = 0) -> OpsTable:
    """torch's ``key_averages(group_by_input_shape=by_shape, group_by_stack_n=stack_n)`` of one trace."""
    source, ev = _events(table, by_shape, stack_n)
    measured = A.measure(ev, stack_n)
    out = _table(table, source, "torch", measured, A.rows(measured, ev.names, by_shape, stack_n), by_shape, stack_n)
    return replace(out, torch_us=A.torch_us(measured, by_shape, stack_n))


def operators(table: pa.Table, by_shape: bool = False, stack_n: int = 0) -> OpsTable:
    """traceconv's view of the operators of one trace, and how it differs from torch's."""
    source, ev = _events(table, by_shape, stack_n)
    measured = A.measure(ev, stack_n)
    torch_rows = A.rows(measured, ev.names, by_shape, stack_n)
    rows, mine = N.view(measured, ev.names, by_shape, stack_n)
    if not by_shape and not stack_n:
        rows = _with_roofline(table, rows)
    out = _table(table, source, "traceconv", mine, rows, by_shape, stack_n)
    return replace(
        out,
        self_cpu_total_ns=sum(r.self_cpu_ns for r in rows),
        runtime=N.runtime(torch_rows),
        differences=N.differences(torch_rows, rows, measured),
    )


def _flop_ops() -> list[str]:
    """The operators whose ``args`` the roofline reads (imported here: the roofline imports this package)."""
    from traceconv.analyses.roofline.flops import FAMILY_PREFIXES

    return list(FAMILY_PREFIXES)


def _with_roofline(table: pa.Table, rows: list[OpStats]) -> list[OpStats]:
    """Each operator with the TFLOP/s of its matrix work and its place on the roofline, where known."""
    from traceconv.analyses.roofline import op_roofs
    from traceconv.analyses.source import Source

    with Source(table) as source:
        roofs = {o.name: o for o in op_roofs(source)}
    return [replace(r, tflops=o.tflops, pct_of_roof=o.pct_of_roof) if (o := roofs.get(r.name)) else r for r in rows]


def _events(table: pa.Table, by_shape: bool, stack_n: int) -> tuple[str, Events]:
    source = _source(table)
    if source == "nsys":
        from traceconv.analyses.key_averages import nsys

        return source, nsys.events(table, with_shapes=by_shape)
    flops = bool(session(table).get("with_flops"))
    return source, P.events(table, with_shapes=by_shape, with_stacks=stack_n > 0, with_flops=flops)


def _notes(source: str, rows: list[OpStats], by_shape: bool, stack_n: int) -> list[str]:
    """What a grouping asked for could not give (said, never silently dropped)."""
    out = []
    if by_shape and all(r.input_shapes == "[]" for r in rows):
        how = "--pytorch=autograd-shapes-nvtx" if source == "nsys" else "record_shapes=True"
        out.append(f"the input has no input shapes ({how} records them): every row's input_shapes is []")
    if stack_n and not any(r.stack for r in rows):
        how = (
            "an Nsight Systems export has none"
            if source == "nsys"
            else "torch records them with with_stack=True and experimental_config=_ExperimentalConfig(verbose=True)"
        )
        out.append(f"the input has no Python stacks ({how}): every row's stack is empty")
    return out


def _table(
    table: pa.Table, source: str, view: str, measured: A.Measured, rows: list[OpStats], by_shape: bool, stack_n: int
) -> OpsTable:
    frame = measured.frame
    gpu_rows = ((frame["device"] == "cuda") & ~frame["user"]).to_numpy()
    flags = session(table)
    seen = bool((frame["what"] == MEMORY).any() or frame["cpu_mem_bytes"].any() or frame["gpu_mem_bytes"].any())
    memory = bool(flags["profile_memory"]) if "profile_memory" in flags else seen
    return OpsTable(
        source=source,
        view=view,
        group_by=(["input_shapes"] if by_shape else []) + (["stack"] if stack_n else []),
        rows=rows,
        self_cpu_total_ns=int(frame["self_cpu_ns"].sum()),
        self_gpu_total_ns=int(frame.loc[gpu_rows, "self_gpu_ns"].sum()),
        memory=memory,
        with_flops=bool(flags.get("with_flops")) and source == "pytorch",
        notes=_notes(source, rows, by_shape, stack_n),
    )


def _source(table: pa.Table) -> str:
    if "trace_id" in table.column_names and table.num_rows:
        traces = pc.unique(table["trace_id"].cast(pa.string())).drop_null()
        if len(traces) > 1:
            raise UsageError(
                None,
                f"the input holds {len(traces)} traces (ranks); torch's key_averages() is per process",
                "give one rank's trace",
            )
    if "source" not in table.column_names or not table.num_rows:
        return "pytorch"
    values = pc.unique(table["source"].cast(pa.string())).drop_null().to_pylist()
    return "nsys" if values == ["nsys"] else "pytorch"


__all__ = ["INPUT_COLUMNS", "key_averages", "load", "operators", "session"]
