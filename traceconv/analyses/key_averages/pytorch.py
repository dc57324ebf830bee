"""torch's FunctionEvents rebuilt from a PyTorch trace (``torch/autograd/profiler.py``, ``_parse_kineto_results``).

- Operators and ``record_function`` ranges keep their times; their ``External id`` is their
  correlation id. A few utility operators are left out as torch leaves them out
  (``_filter_name``); Python functions (``with_stack``) are never rows.
- API calls and GPU work are linked to the operator their ``External id`` names (none:
  not linked, as CUDA graph replays): the GPU time of an operator's kernels, copies and
  memsets is appended to it, and its API calls are nested on its thread.
- Kineto's own events without an operator (profiler overhead, the GPU side of annotations,
  API calls outside operators) are placed as torch's ``build_tree`` places them
  (:mod:`.replay`): on the thread that stopped the profiler, with their parent's id.
- Allocator events are attributed by time (:mod:`.memory`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traceconv.analyses.key_averages import flops as F
from traceconv.analyses.key_averages import memory as M
from traceconv.analyses.key_averages import replay as R
from traceconv.analyses.key_averages import stacks as ST
from traceconv.analyses.key_averages.events import (
    ANNOTATION,
    F64,
    GPU,
    GPU_ANNOTATION,
    I64,
    MEMORY,
    OP,
    OVERHEAD,
    RUNTIME,
    Bools,
    Events,
    column,
    dictionary,
    kinds,
    lookup,
    micros,
    present,
    recode,
)

INPUT_COLUMNS = (
    "trace_id",
    "event_id",
    "kind",
    "category",
    "name",
    "start_ns",
    "end_ns",
    "pid",
    "tid",
    "device",
    "correlation_id",
    "external_id",
    "launch_event_id",
    "launch_name",  # the roofline's: a CUDA graph replay does its captured operators' work again
    "op_event_id",
    "bytes",
    "args",
)
KINDS = ("cpu_op", "nvtx", "cuda_api", "kernel", "memcpy", "memset", "sync", "overhead", "memory", "python", "marker")
# torch.autograd.profiler_util._filter_name: never rows of key_averages()
FILTERED = frozenset(
    {
        "[memory]",
        "[OutOfMemory]",
        "profiler::_record_function_enter",
        "profiler::_record_function_enter_new",
        "profiler::_record_function_exit",
        "aten::is_leaf",
        "aten::output_nr",
        "aten::_version",
    }
)
PYTHON = -1  # ``what`` of a Python function: only in the replay
RECORD = -2  # an allocator event
_CLASS = {"cpu_op": OP, "cuda_api": RUNTIME, "kernel": GPU, "memcpy": GPU, "memset": GPU, "sync": GPU}
_CLASS |= {"overhead": OVERHEAD, "python": PYTHON}


@dataclass
class Trace:
    """The rows of a trace ``key_averages`` reads, as arrays in event order."""

    table: pa.Table
    what: I64
    name: I64  # codes into ``names``
    names: list[str]
    start: I64
    end: I64
    tid: I64
    ext: I64  # External id (operators: their correlation id)
    corr: I64  # CUPTI correlation id
    linked: I64  # API calls and GPU work: their operator's correlation id, 0 for none
    launched: Bools  # GPU work with its launching call in the trace (a flow: never on a stack)
    op_row: I64  # the reader's operator of API calls and GPU work (event_id, -1 for none)
    row: I64
    main: int  # the thread that stopped the profiler
    origin: int  # torch's trace_start_ns: the start of the profiler's span


def events(table: pa.Table, with_shapes: bool = False, with_stacks: bool = False, with_flops: bool = False) -> Events:
    """torch's FunctionEvents of a PyTorch trace, in event-list order."""
    trace = _trace(table)
    filtered = np.array([n in FILTERED for n in trace.names] + [False], bool)
    keep = (trace.what >= 0) & ~filtered[trace.name]
    fid, parent, stacked = _fids(trace)
    cpu = keep & (trace.what != GPU) & (trace.what != GPU_ANNOTATION)
    kernels, kernels_us, thread = _kernels(trace, fid, _threads(trace), keep, cpu)
    mem_cpu, mem_gpu, records, free, labels = _memory(trace, cpu)
    idx = np.flatnonzero(keep)
    out = Events(
        what=trace.what[idx],
        name=trace.name[idx],
        names=trace.names,
        thread=thread[idx],
        start=trace.start[idx],
        end=trace.end[idx],
        fid=fid[idx],
        kernels_ns=kernels[idx],
        cpu_mem=mem_cpu[idx],
        gpu_mem=mem_gpu[idx],
        row=trace.row[idx],
        kernels_us=kernels_us[idx],
        launched_ns=_launched(trace)[idx],
        origin=trace.origin,
    )
    if with_shapes:
        out.shapes = ST.shapes(trace.table, trace.what, idx)
    if with_stacks:
        out.stacks, out.seq, out.fwd = ST.stacks(trace, idx, parent, stacked)
    if with_flops:
        out.flops = F.flops(trace.names, trace.name, trace.table["args"], idx)
    return _in_list_order(_with_free_records(out, records, free, labels))


def _memory(trace: Trace, cpu: Bools) -> tuple[I64, I64, M.Records, Bools, np.ndarray]:
    """Per row, the CPU and device memory of the CPU events; the allocator and out-of-memory
    events left to rows of their own (``free``) and their names."""
    records = _records(trace, RECORD)
    cpu_mem, gpu_mem, used = M.attribute(records, trace.start[cpu], trace.end[cpu])
    ooms = _records(trace, MEMORY)
    labels = np.array(["[memory]"] * len(records.time) + ["[OutOfMemory]"] * len(ooms.time), dtype=object)
    records, free = _free(records, ~used, ooms)
    mem_cpu = np.zeros(len(trace.what), np.int64)
    mem_gpu = np.zeros(len(trace.what), np.int64)
    mem_cpu[cpu], mem_gpu[cpu] = cpu_mem, gpu_mem
    return mem_cpu, mem_gpu, records, free, labels


def _trace(table: pa.Table) -> Trace:
    rows = kinds(table, KINDS)
    if "event_id" in rows.column_names:
        rows = rows.sort_by("event_id")
    kind_code, kind_names = dictionary(rows, "kind")
    name, names = dictionary(rows, "name")
    name, names = recode(name, names, {n: "ProfilerStep*" for n in names if n.startswith("ProfilerStep#")})
    what = np.array([_CLASS.get(k, -9) for k in kind_names] + [-9], np.int64)[kind_code]
    kind = np.array([*kind_names, ""], dtype=object)[kind_code]
    named = np.array([*names, ""], dtype=object)[name] if len(name) else np.empty(0, object)
    nvtx = kind == "nvtx"
    on_gpu = present(rows, "device")
    what[nvtx] = np.where(on_gpu[nvtx], GPU_ANNOTATION, ANNOTATION)
    what[(kind == "memory") & (named == "[memory]")] = RECORD
    what[(kind == "marker") & (named == "[OutOfMemory]")] = MEMORY
    start = column(rows, "start_ns")
    end = np.where(present(rows, "end_ns"), column(rows, "end_ns"), start)
    ext, row = column(rows, "external_id"), column(rows, "event_id", -1)
    is_op = (what == OP) | (what == ANNOTATION)
    # torch links an API call or GPU work to the operator whose correlation id Kineto gave it,
    # the trace's External id; none (CUDA graph replays, calls outside operators): not linked
    named = np.isin(ext, ext[is_op]) & (ext > 0)
    linked = np.where(((what == RUNTIME) | (what == GPU)) & named, ext, 0)
    tid, pid = column(rows, "tid", -1), column(rows, "pid", -1)
    return Trace(
        table=rows,
        what=what,
        name=name,
        names=names,
        start=start,
        end=end,
        tid=tid,
        ext=ext,
        corr=column(rows, "correlation_id"),
        linked=linked,
        launched=present(rows, "launch_event_id"),
        op_row=column(rows, "op_event_id", -1),
        row=row,
        main=_main_thread(tid[is_op], pid[is_op], start[is_op]),
        origin=_origin(table, start),
    )


def _origin(table: pa.Table, start: I64) -> int:
    """torch's ``trace_start_ns``: the start of Kineto's ``PyTorch Profiler`` span (else the first event)."""
    if "category" in table.column_names:
        spans = table.filter(pc.equal(table["category"].cast(pa.string()), "Trace"))
        if spans.num_rows:
            return int(pc.min(spans["start_ns"]).as_py())
    return int(start.min()) if len(start) else 0


def _main_thread(tid: I64, pid: I64, start: I64) -> int:
    """The thread that stopped the profiler: the process's main thread (tid == pid), else the first one."""
    if not len(tid):
        return 0
    main = tid[tid == pid]
    if len(main):
        values, counts = np.unique(main, return_counts=True)
        return int(values[np.argmax(counts)])
    return int(tid[np.argmin(start)])


def unlinked(trace: Trace) -> Bools:
    """Kineto's events that torch's ``build_tree`` pushes onto the stopping thread's stack."""
    w = trace.what
    loose_gpu = (w == GPU) & (trace.linked == 0) & ~trace.launched
    loose = (w == OVERHEAD) | (w == GPU_ANNOTATION) | ((w == RUNTIME) & (trace.linked == 0)) | loose_gpu
    return np.asarray(loose, dtype=bool)


def _fids(trace: Trace) -> tuple[I64, I64, I64]:
    """``FunctionEvent.id`` of every row; the replay's parents and the rows it covered."""
    w = trace.what
    fid = np.where((w == OP) | (w == ANNOTATION) | (w == GPU_ANNOTATION), trace.ext, trace.corr)
    fid = np.where(w == OVERHEAD, 0, fid)
    loose = unlinked(trace)
    if not loose.any():
        return fid, np.empty(0, np.int64), np.empty(0, np.int64)
    mine = ((w == OP) | (w == ANNOTATION) | (w == PYTHON)) & (trace.tid == trace.main)
    rows = np.flatnonzero(mine | loose)
    rank = np.where(loose[rows], 2, np.where(w[rows] == PYTHON, 1, 0))
    rows = rows[R.order(trace.start[rows], rank, trace.row[rows])]
    stacked = R.Stacked(
        start=trace.start[rows],
        end=trace.end[rows],
        corr=np.where(w[rows] == PYTHON, 0, fid[rows]),
        inherits=loose[rows],
    )
    corr, parent = R.correlations(stacked)
    fid[rows] = corr
    return fid, parent, rows


def _threads(trace: Trace) -> I64:
    """The thread of each event as torch nests it: API calls and GPU work on their operator's."""
    w = trace.what
    is_op = (w == OP) | (w == ANNOTATION)
    op_tid = lookup(trace.ext[is_op], trace.tid[is_op], trace.linked, trace.main)
    thread = np.where(is_op | (w == MEMORY) | (w == RECORD), trace.tid, trace.main)
    return np.where(trace.linked > 0, op_tid, thread).astype(np.int64)


def _kernels(trace: Trace, fid: I64, thread: I64, keep: Bools, cpu: Bools) -> tuple[I64, F64, I64]:
    """GPU time torch appends to each CPU event (that of the GPU work linked to its id, also
    in torch's float microseconds, summed in its order), and the threads of linked CPU
    events (their operator's: the last event of that id wins)."""
    front = keep & cpu & (trace.linked == 0)
    gpu = np.flatnonzero(keep & (trace.what == GPU) & (trace.linked > 0))
    gpu = gpu[np.lexsort((trace.row[gpu], trace.start[gpu]))]
    ids, inverse = np.unique(trace.linked[gpu], return_inverse=True)
    sums = np.zeros(len(ids), np.int64)
    np.add.at(sums, inverse, (trace.end - trace.start)[gpu])
    sums_us = np.zeros(len(ids), np.float64)
    np.add.at(sums_us, inverse, micros(trace.end[gpu], trace.origin) - micros(trace.start[gpu], trace.origin))
    kernels = np.where(front, lookup(ids, sums, fid, 0), 0).astype(np.int64)
    at = lookup(ids, np.arange(len(ids), dtype=np.int64), fid, -1)
    kernels_us = np.where(front & (at >= 0), sums_us[np.maximum(at, 0)] if len(ids) else 0.0, 0.0)
    order = np.flatnonzero(front)[np.lexsort((trace.row[front], trace.start[front]))][::-1]  # the last one wins
    linked_cpu = keep & cpu & (trace.linked > 0)
    moved = lookup(fid[order], thread[order], trace.linked[linked_cpu], -1)
    thread = thread.copy()
    thread[linked_cpu] = np.where(moved >= 0, moved, thread[linked_cpu])
    return kernels, kernels_us, thread


def _launched(trace: Trace) -> I64:
    """Own view: per operator or annotation, the GPU time of the work launched right inside it
    (the reader's link: the launching call's innermost operator, with or without an External id)."""
    out = np.zeros(len(trace.what), np.int64)
    gpu = np.flatnonzero(trace.what == GPU)
    at = lookup(trace.row, np.arange(len(trace.row), dtype=np.int64), trace.op_row[gpu], -1)
    ok = at >= 0
    np.add.at(out, at[ok], (trace.end - trace.start)[gpu][ok])
    return out


def _records(trace: Trace, what: int) -> M.Records:
    """Allocator events (``RECORD``) or out-of-memory events (``MEMORY``). The reader keeps the
    ``Device Id`` of device memory in ``device`` and leaves it null for host memory (id -1)."""
    rec = trace.what == what
    return M.Records(
        time=trace.start[rec],
        bytes=column(trace.table, "bytes")[rec],
        device_type=np.where(present(trace.table, "device")[rec], M.CUDA, M.CPU).astype(np.int64),
        thread=trace.tid[rec],
        row=trace.row[rec],
    )


def _free(records: M.Records, free: Bools, ooms: M.Records) -> tuple[M.Records, Bools]:
    """The allocator events no CPU event took, and every out-of-memory event (torch keeps those as they are)."""
    fields = ("time", "bytes", "device_type", "thread", "row")
    both = M.Records(*(np.concatenate([getattr(records, f), getattr(ooms, f)]) for f in fields))
    return both, np.concatenate([free, np.ones(len(ooms.time), bool)])


def _with_free_records(out: Events, records: M.Records, free: Bools, labels: np.ndarray) -> Events:
    """The allocator events no CPU event took, as events of their own (``[memory]``, ``[OutOfMemory]``)."""
    k = int(free.sum())
    extra = {label: len(out.names) + i for i, label in enumerate(("[memory]", "[OutOfMemory]"))}
    out.names = [*out.names, *extra]
    out.name = np.concatenate([out.name, np.array([extra[str(v)] for v in labels[free]], np.int64)])
    cat = np.concatenate

    out.what = cat([out.what, np.full(k, MEMORY, np.int64)])
    out.thread = cat([out.thread, records.thread[free]])
    out.start, out.end = cat([out.start, records.time[free]]), cat([out.end, records.time[free]])
    out.fid = cat([out.fid, np.full(k, -1, np.int64)])
    out.kernels_ns = cat([out.kernels_ns, np.zeros(k, np.int64)])
    if out.launched_ns is not None:
        out.launched_ns = cat([out.launched_ns, np.zeros(k, np.int64)])
    if out.flops is not None:
        out.flops = cat([out.flops, np.zeros(k, np.int64)])
    if out.kernels_us is not None:
        out.kernels_us = cat([out.kernels_us, np.zeros(k, np.float64)])
    out.cpu_mem, out.gpu_mem = cat([out.cpu_mem, records.cpu_bytes[free]]), cat([out.gpu_mem, records.gpu_bytes[free]])
    out.row = cat([out.row, records.row[free]])
    if out.shapes is not None:
        out.shapes = cat([out.shapes, np.full(k, "[]", dtype=object)])
    if out.stacks is not None and out.seq is not None and out.fwd is not None:
        out.stacks = out.stacks + [()] * k
        out.seq, out.fwd = cat([out.seq, np.full(k, -1, np.int64)]), cat([out.fwd, np.zeros(k, np.int64)])
    return out


def _in_list_order(ev: Events) -> Events:
    """Sorted as torch sorts its event list: by start, the longest first, then trace order."""
    order = np.lexsort((ev.row, -ev.end, ev.start))
    take = {f: getattr(ev, f)[order] for f in ("what", "name", "thread", "start", "end", "fid", "kernels_ns")}
    take |= {f: getattr(ev, f)[order] for f in ("cpu_mem", "gpu_mem", "row")}
    out = Events(names=ev.names, origin=ev.origin, **take)
    if ev.kernels_us is not None:
        out.kernels_us = ev.kernels_us[order]
    if ev.launched_ns is not None:
        out.launched_ns = ev.launched_ns[order]
    if ev.flops is not None:
        out.flops = ev.flops[order]
    if ev.shapes is not None:
        out.shapes = ev.shapes[order]
    if ev.stacks is not None and ev.seq is not None and ev.fwd is not None:
        out.stacks = [ev.stacks[i] for i in order]
        out.seq, out.fwd = ev.seq[order], ev.fwd[order]
    return out
