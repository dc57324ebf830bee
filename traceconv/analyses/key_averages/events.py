"""torch's ``FunctionEvent`` list as arrays: what every view of ``ops`` is computed from.

One entry per event ``torch.autograd.profiler._parse_kineto_results`` keeps, in trace order:
CPU operators and ``record_function`` ranges, CUDA runtime and driver calls, the profiler's
own work (``overhead``), GPU work (kernels, copies, memsets, syncs, the GPU side of an
annotation), and the allocator events no CPU event encloses (named ``[memory]``). The
readers of :mod:`.pytorch` and :mod:`.nsys` fill it; :mod:`.aggregate` folds it into rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]

# What an event is (``Events.what``).
OP, ANNOTATION, RUNTIME, OVERHEAD, GPU, GPU_ANNOTATION, MEMORY = range(7)
CPU_CLASSES = (OP, ANNOTATION, RUNTIME, OVERHEAD, MEMORY)
WHAT = {OP: "op", ANNOTATION: "annotation", RUNTIME: "runtime", OVERHEAD: "overhead", GPU: "gpu"}
WHAT |= {GPU_ANNOTATION: "gpu_annotation", MEMORY: "memory"}


@dataclasses.dataclass
class Events:
    """torch's FunctionEvents of one trace, one array entry each.

    ``fid`` is ``FunctionEvent.id`` (the operator's correlation id, an API call's CUPTI
    correlation); ``kernels_ns`` the GPU time torch appends to it (the GPU work whose linked
    correlation id is its ``fid``); ``thread`` the thread it is nested on (an API call takes
    its operator's). ``shapes`` (``str(input_shapes)``) and ``stacks`` are filled when asked for.
    """

    what: I64
    name: I64  # codes into ``names``
    names: list[str]
    thread: I64
    start: I64
    end: I64
    fid: I64
    kernels_ns: I64
    cpu_mem: I64
    gpu_mem: I64
    row: I64  # event_id in the unified table; -1 for none
    shapes: npt.NDArray[np.object_] | None = None
    stacks: list[tuple[str, ...]] | None = None
    seq: I64 | None = None  # ``Sequence number``, -1 for none (backward stacks)
    fwd: I64 | None = None  # ``Fwd thread id``, 0 for none
    kernels_us: F64 | None = None  # ``kernels_ns`` as torch sums it, in float microseconds
    launched_ns: I64 | None = None  # own view: GPU time of the work launched right inside (the reader's link)
    flops: I64 | None = None  # torch's FLOPs estimate (with_flops sessions)
    origin: int = 0  # torch's ``trace_start_ns``: its times are microseconds from here

    def __len__(self) -> int:
        return len(self.what)

    @property
    def is_cpu(self) -> Bools:
        return np.isin(self.what, CPU_CLASSES)

    @property
    def is_user(self) -> Bools:
        """``FunctionEvent.is_user_annotation``: both sides of a ``record_function`` range."""
        return np.isin(self.what, (ANNOTATION, GPU_ANNOTATION))


def micros(ns: I64, origin: int) -> F64:
    """torch's times: float microseconds from ``origin`` (``rel_start_ns / 1000``)."""
    return np.asarray((ns - origin) / 1000.0, dtype=np.float64)


def column(table: pa.Table, name: str, fill: int = 0) -> I64:
    """An integer column as int64, nulls as ``fill``."""
    col = table[name]
    if not pa.types.is_integer(col.type):
        col = col.cast(pa.int64())
    return np.asarray(pc.fill_null(col, fill).to_numpy(zero_copy_only=False), dtype=np.int64)


def present(table: pa.Table, name: str) -> Bools:
    return np.asarray(pc.is_valid(table[name]).to_numpy(zero_copy_only=False), dtype=bool)


def text(table: pa.Table, name: str) -> npt.NDArray[np.object_]:
    """A string (or dictionary) column as Python strings, nulls as ``""``."""
    col = table[name]
    if pa.types.is_dictionary(col.type):
        col = col.cast(pa.string())
    return np.asarray(pc.fill_null(col, "").to_numpy(zero_copy_only=False), dtype=object)


def kinds(table: pa.Table, wanted: Sequence[str]) -> pa.Table:
    """The rows of ``table`` whose ``kind`` is one of ``wanted``."""
    mask = pc.is_in(table["kind"].cast(pa.string()), value_set=pa.array(list(wanted), pa.string()))
    return table.filter(mask)


def dictionary(table: pa.Table, name: str) -> tuple[I64, list[str]]:
    """A string column as integer codes into its distinct values (nulls: ``""``)."""
    col = pc.fill_null(table[name].cast(pa.string()), "")
    encoded = pc.dictionary_encode(col).combine_chunks() if table.num_rows else None
    if encoded is None:
        return np.empty(0, np.int64), []
    return np.asarray(encoded.indices.to_numpy(zero_copy_only=False), np.int64), encoded.dictionary.to_pylist()


def encode(values: npt.NDArray[np.object_]) -> tuple[I64, list[str]]:
    """Strings as integer codes into their distinct values (first-seen order)."""
    codes, uniques = pd.factorize(pd.Series(values, dtype=object), sort=False)
    return np.asarray(codes, np.int64), [str(u) for u in uniques]


def recode(code: I64, values: list[str], rename: dict[str, str]) -> tuple[I64, list[str]]:
    """Codes after renaming some values (values that become equal merge into one code)."""
    renamed = [rename.get(v, v) for v in values]
    merged = list(dict.fromkeys(renamed))
    index = {v: i for i, v in enumerate(merged)}
    table = np.array([index[v] for v in renamed], np.int64)
    return (table[code] if len(code) else code), merged


def lookup(keys: I64, values: I64, wanted: I64, default: int = -1) -> I64:
    """``values[keys == w]`` for each ``w`` of ``wanted`` (the first such key), ``default`` if none."""
    if not len(keys):
        return np.full(len(wanted), default, np.int64)
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    at = np.minimum(np.searchsorted(sk, wanted), len(sk) - 1)
    hit = sk[at] == wanted
    return np.where(hit, values[order[at]], default).astype(np.int64)


def arg_ints(args: pa.ChunkedArray | pa.Array, key: str) -> I64:
    """An integer argument (``"Device Type": 1``) read from the JSON ``args`` text, -1 where absent."""
    pattern = '"' + key + r'":\s*(?P<v>-?\d+)'
    found = pc.extract_regex(pc.fill_null(args, ""), pattern)
    flat = found.combine_chunks() if isinstance(found, pa.ChunkedArray) else found
    values = pc.cast(pc.struct_field(flat, "v"), pa.int64())
    return np.asarray(pc.fill_null(values, -1).to_numpy(zero_copy_only=False), dtype=np.int64)
