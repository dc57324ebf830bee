"""The same FunctionEvents from an Nsight Systems export made with ``--pytorch=autograd-nvtx``
(or ``autograd-shapes-nvtx``, or ``torch.autograd.profiler.emit_nvtx``).

Each operator is an NVTX range named ``aten::mm, seq = 5, op_id = 396, sizes = [[1024, 256],
[256, 768]], input_op_ids = [...]``: the name before the first comma is the operator, ``sizes``
its input shapes. Other NVTX ranges (``step_3``, ``record_function`` labels) are annotations.
An API call or GPU work belongs to the innermost range around the call (``op_event_id``), as
a kernel belongs to the operator whose correlation id it carries in a PyTorch trace. The
export has no allocator events and no profiler overhead inside operators, so memory is 0.
"""

from __future__ import annotations

import re

import numpy as np
import orjson
import pyarrow as pa

from traceconv.analyses.key_averages.events import (
    ANNOTATION,
    GPU,
    I64,
    OP,
    RUNTIME,
    Bools,
    Events,
    column,
    encode,
    kinds,
    lookup,
    present,
    text,
)
from traceconv.analyses.key_averages.pytorch import FILTERED

KINDS = ("nvtx", "cuda_api", "kernel", "memcpy", "memset")
_SUFFIX = re.compile(r", (seq|op_id|sizes|input_op_ids) = .*$", re.DOTALL)
_SIZES = re.compile(r", sizes = (\[.*?\])(?:, input_op_ids = |$)", re.DOTALL)
_CLASS = {"cuda_api": RUNTIME, "kernel": GPU, "memcpy": GPU, "memset": GPU}


def events(table: pa.Table, with_shapes: bool = False) -> Events:
    """FunctionEvents of an nsys export, in event-list order."""
    rows = kinds(table, KINDS)
    if "event_id" in rows.column_names:
        rows = rows.sort_by("event_id")
    kind = text(rows, "kind")
    host = (kind != "nvtx") | ~present(rows, "device")  # nvtx rows with a device are GPU projections
    rows, kind = rows.filter(pa.array(host)), kind[host]
    full = text(rows, "name")
    is_op = np.array([bool(_SUFFIX.search(s)) for s in full], bool) & (kind == "nvtx")
    what = np.where(is_op, OP, np.array([_CLASS.get(k, ANNOTATION) for k in kind], np.int64))
    name = np.array([_SUFFIX.sub("", s) for s in full], dtype=object)
    keep = ~np.isin(name, list(FILTERED))
    start = column(rows, "start_ns")
    end = np.where(present(rows, "end_ns"), column(rows, "end_ns"), start)
    row, tid = column(rows, "event_id", -1), column(rows, "tid", -1)
    ranges = kind == "nvtx"
    # ids are event_id + 1, so that 0 means "no operator"
    linked = np.where(ranges, 0, lookup(row[ranges], row[ranges] + 1, column(rows, "op_event_id", -1), 0))
    fid = np.where(ranges, row + 1, -1)
    thread = np.where(linked > 0, lookup(row[ranges] + 1, tid[ranges], linked, -1), -1)
    idx = np.flatnonzero(keep)
    name_codes, names = encode(name[idx])
    zeros = np.zeros(len(idx), np.int64)
    out = Events(
        what=what[idx].astype(np.int64),
        name=name_codes,
        names=names,
        thread=np.where(thread >= 0, thread, tid)[idx],
        start=start[idx],
        end=end[idx],
        fid=fid[idx],
        kernels_ns=_kernels(keep & (what == GPU), linked, end - start, fid, ranges)[idx],
        cpu_mem=zeros,
        gpu_mem=zeros.copy(),
        row=row[idx],
    )
    if with_shapes:
        out.shapes = np.array([_shapes(full[i]) if is_op[i] else "[]" for i in idx], dtype=object)
    return _take(out, np.lexsort((out.row, -out.end, out.start)))


def _kernels(gpu: Bools, linked: I64, dur: I64, fid: I64, ranges: Bools) -> I64:
    """Per range, the GPU time of the work launched right inside it."""
    gpu = gpu & (linked > 0)
    ids, inverse = np.unique(linked[gpu], return_inverse=True)
    sums = np.zeros(len(ids), np.int64)
    np.add.at(sums, inverse, dur[gpu])
    return np.where(ranges, lookup(ids, sums, fid, 0), 0).astype(np.int64)


def _shapes(label: str) -> str:
    """``sizes = [[4000, 256]]`` as torch prints input shapes: ``[[4000, 256]]``."""
    found = _SIZES.search(label)
    if not found:
        return "[]"
    try:
        dims = orjson.loads(found.group(1))
    except orjson.JSONDecodeError:
        return found.group(1)
    if not isinstance(dims, list):
        return "[]"
    return str([d if isinstance(d, list) and all(isinstance(x, int) for x in d) else [] for d in dims])


def _take(ev: Events, order: np.ndarray) -> Events:
    out = Events(
        what=ev.what[order],
        name=ev.name[order],
        names=ev.names,
        thread=ev.thread[order],
        start=ev.start[order],
        end=ev.end[order],
        fid=ev.fid[order],
        kernels_ns=ev.kernels_ns[order],
        cpu_mem=ev.cpu_mem[order],
        gpu_mem=ev.gpu_mem[order],
        row=ev.row[order],
    )
    if ev.shapes is not None:
        out.shapes = ev.shapes[order]
    return out
