"""Each rank's communication kernels, with what the trace says about them.

PyTorch (Kineto) writes a collective's name, process group, message sizes, dtype and group size
on the NCCL kernel (``Collective name``, ``Process Group Name``, ``In msg nelems`` ...) and on the
``record_param_comms`` operator that launched it; older traces only on the operator, or not at
all. What is missing is taken from the operator's name (``c10d::allreduce_``), then from the
kernel's (``ncclDevKernel_AllReduce_Sum_f32_RING_LL``), and is otherwise null: never guessed.
Nsight Systems exports give the kernel name (NCCL's NVTX payloads, where present, are not read yet).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

from traceconv.analyses.ranks.units import UNIT_SQL, Unit, comm_sql
from traceconv.analyses.source import Source

DEFAULT_GROUP = "default"  # the process group of collectives whose trace does not name one
_KERNEL = re.compile(r"(?:nccl|rccl)\w*?Kernel_([A-Za-z]+?)(?:_|\(|$)", re.IGNORECASE)
_ALGORITHM = re.compile(r"_(RING|TREE|COLLNET(?:_DIRECT|_CHAIN)?|NVLS(?:_TREE)?|PAT)(?:_(LL128|LL|SIMPLE))?", re.I)
# bytes per element of Kineto's dtype names (c10::ScalarType) and NCCL's
DTYPE_BYTES = {
    "float": 4, "float32": 4, "f32": 4, "int": 4, "int32": 4, "uint32": 4,
    "double": 8, "float64": 8, "f64": 8, "long": 8, "int64": 8, "uint64": 8,
    "half": 2, "float16": 2, "f16": 2, "bfloat16": 2, "bf16": 2, "short": 2, "int16": 2,
    "char": 1, "byte": 1, "bool": 1, "int8": 1, "uint8": 1, "int8_t": 1, "uint8_t": 1,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1,
}  # fmt: skip
_FIELDS = {
    "collective": "Collective name",
    "pg": "Process Group Name",
    "in_nelems": "In msg nelems",
    "out_nelems": "Out msg nelems",
    "dtype": "dtype",
    "group_size": "Group size",
}


@dataclass(frozen=True)
class Calls:
    """One rank's communication kernels in start order (a frame with the columns below)."""

    unit: Unit
    rows: pd.DataFrame  # start_ns, end_ns, dur_ns, name, collective, pg, in_nelems, out_nelems, dtype, group_size


def calls(source: Source, unit: Unit) -> Calls:
    def field(key: str) -> str:
        path = f"'$.\"{key}\"'"
        if not source.has("args"):
            return "NULL"
        return f"coalesce(json_extract_string(k.args, {path}), json_extract_string(o.args, {path}))"

    picked = ", ".join(f"{field(key)} AS {name}" for name, key in _FIELDS.items())
    op_name = "k.op_name" if source.has("op_name") else "NULL AS op_name"
    op_args = "args" if source.has("args") else "NULL AS args"
    rows = source.frame(
        f"WITH k AS (SELECT * FROM events WHERE {comm_sql(source)} AND start_ns IS NOT NULL AND end_ns IS NOT NULL "
        f"AND {UNIT_SQL}), "
        f"o AS (SELECT event_id, {op_args} FROM events WHERE trace_id IS NOT DISTINCT FROM ? "
        "AND event_id IN (SELECT op_event_id FROM k)) "
        f"SELECT k.start_ns, k.end_ns, k.end_ns - k.start_ns AS dur_ns, k.name, {op_name}, {picked} "
        "FROM k LEFT JOIN o ON o.event_id = k.op_event_id ORDER BY k.start_ns, k.event_id",
        [*unit.key, unit.trace_id],
    )
    names = [_collective(c, op, k) for c, op, k in zip(rows["collective"], rows["op_name"], rows["name"], strict=True)]
    out = rows.assign(
        collective=pd.Series(names, dtype=object, index=rows.index),
        pg=rows["pg"].fillna(DEFAULT_GROUP).astype(str),
        in_nelems=_ints(rows["in_nelems"]),
        out_nelems=_ints(rows["out_nelems"]),
        group_size=_ints(rows["group_size"]),
    )
    return Calls(unit, out.drop(columns=["op_name"]))


def _collective(arg: object, op: object, kernel: object) -> str:
    if isinstance(arg, str) and arg:
        return arg.lower()
    if isinstance(op, str) and op.startswith("c10d::"):
        return op[len("c10d::") :].strip("_").lower()
    m = _KERNEL.search(str(kernel))
    return m.group(1).lower() if m else "unknown"


def algorithm(kernel: str) -> str | None:
    """NCCL's algorithm and protocol from its kernel's name (``RING_LL``), where the name has them."""
    m = _ALGORITHM.search(kernel)
    return "_".join(p.upper() for p in m.groups() if p) if m else None


def bus_factor(collective: str, n: int) -> float:
    """NCCL-tests' bus bandwidth factor (doc/PERFORMANCE.md) for ``n`` ranks."""
    key = re.sub(r"[^a-z]", "", collective.lower())
    if n < 1:
        return 1.0
    if "allreduce" in key:
        return 2.0 * (n - 1) / n
    if any(k in key for k in ("reducescatter", "allgather", "alltoall")):
        return (n - 1) / n
    return 1.0  # broadcast, reduce, send/recv


def message_bytes(in_nelems: int | None, out_nelems: int | None, dtype: str | None) -> int | None:
    """NCCL-tests' S: the whole array (allgather's output, reduce-scatter's input), in bytes."""
    size = DTYPE_BYTES.get(str(dtype).lower()) if dtype is not None else None
    counts = [c for c in (in_nelems, out_nelems) if c is not None]
    return max(counts) * size if size is not None and counts else None


def _ints(s: pd.Series) -> pd.Series:
    return pd.to_numeric(s, errors="coerce").astype("Int64")
