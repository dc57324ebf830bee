"""Input shapes and Python stacks of FunctionEvents, as ``key_averages(group_by_input_shape=...,
group_by_stack_n=...)`` groups them.

- Shapes: ``str(FunctionEvent.input_shapes)``, the ``Input Dims`` of an operator with each
  tensor list as ``[]`` (``KinetoEvent::shapes``); ``[]`` for every other event.
- Stacks: torch fills them only with the verbose experimental config, when the trace has a
  ``Call stack`` for its operators. An API call or GPU work takes its operator's; a Kineto
  event of the replay (:mod:`.replay`) the Python functions above it there. Entries from
  torch's own machinery are dropped (``_filter_stack_entry``), and operators run by the
  backward pass take the stack of the forward operator that made them
  (``_set_backward_stacktraces``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from traceconv.analyses.key_averages.events import ANNOTATION, GPU, I64, OP, RUNTIME, Bools, arg_ints, column, lookup

if TYPE_CHECKING:
    from traceconv.analyses.key_averages.pytorch import Trace

_DIMS = r'"Input Dims":\s*(?P<d>\[(?:[^\[\]]|\[(?:[^\[\]]|\[[^\[\]]*\])*\])*\])'
_STACK = r'"Call stack":\s*"(?P<s>(?:[^"\\]|\\.)*)"'
_DROP = (
    ("autograd/__init__", "_make_grads"),
    ("autograd/__init__", "backward"),
    ("torch/tensor", "backward"),
    ("_internal/common_utils", "prof_callable"),
    ("_internal/common_utils", "prof_func_call"),
    ("_internal/common_utils", "prof_meth_call"),
)
EVALUATE = "autograd::engine::evaluate_function: "


def shapes(table: pa.Table, what: I64, idx: I64) -> np.ndarray:
    """``str(input_shapes)`` of the rows ``idx``."""
    out = np.full(len(idx), "[]", dtype=object)
    ops = np.flatnonzero(np.isin(what[idx], (OP, ANNOTATION)))
    if not len(ops):
        return out
    args = pc.fill_null(table["args"].take(pa.array(idx[ops])), "")
    found = pc.extract_regex(args, _DIMS)
    dims = found.combine_chunks() if isinstance(found, pa.ChunkedArray) else found
    texts = pc.struct_field(dims, "d").to_pylist()
    parsed: dict[str, str] = {}
    for k, t in enumerate(texts):
        if t is None:
            whole = args[k].as_py()
            out[ops[k]] = _shape_text(orjson.loads(whole).get("Input Dims")) if "Input Dims" in whole else "[]"
            continue
        if t not in parsed:
            parsed[t] = _shape_text(orjson.loads(t))
        out[ops[k]] = parsed[t]
    return out


def _shape_text(dims: Any) -> str:
    if not isinstance(dims, list):
        return "[]"
    return str([d if isinstance(d, list) and all(isinstance(x, int) for x in d) else [] for d in dims])


def stacks(trace: Trace, idx: I64, parent: I64, stacked: I64) -> tuple[list[tuple[str, ...]], I64, I64]:
    """Per row of ``idx``: the stack torch gives it, its sequence number and forward thread id."""
    table, n = trace.table, len(trace.what)
    is_op = np.isin(trace.what, (OP, ANNOTATION))
    args = table["args"]
    seq = np.where(is_op, arg_ints(args, "Sequence number"), -1)
    fwd = np.maximum(np.where(is_op, arg_ints(args, "Fwd thread id"), 0), 0)
    own = _call_stacks(args, is_op)
    if not any(own[i] for i in np.flatnonzero(is_op)):
        return [()] * len(idx), seq[idx], fwd[idx]
    stack: list[tuple[str, ...]] = [()] * n
    for i in np.flatnonzero(is_op):
        stack[i] = own[i]
    _from_replay(trace, stack, parent, stacked)
    _from_operator(trace, stack, is_op)
    return [stack[i] for i in idx], seq[idx], fwd[idx]


def _call_stacks(args: pa.ChunkedArray, rows: Bools) -> list[tuple[str, ...]]:
    found = pc.extract_regex(pc.fill_null(args, ""), _STACK)
    flat = found.combine_chunks() if isinstance(found, pa.ChunkedArray) else found
    texts = pc.struct_field(flat, "s").to_pylist()
    out: list[tuple[str, ...]] = [()] * len(texts)
    for i in np.flatnonzero(rows):
        t = texts[i]
        if t:
            out[i] = kept(str(orjson.loads('"' + t + '"')).split(";"))
    return out


def kept(entries: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """A stack without empty entries and torch's own frames (``_filter_stack_entry``)."""
    return tuple(e for e in entries if e and all(not (a in e and b in e) for a, b in _DROP))


def _from_replay(trace: Trace, stack: list[tuple[str, ...]], parent: I64, stacked: I64) -> None:
    """Kineto events of the replay: the Python functions above them on the thread's stack."""
    if not len(stacked):
        return
    python = trace.what[stacked] < 0  # PYTHON (only functions are negative among stacked rows)
    names = [trace.names[c] for c in trace.name[stacked]]
    loose = np.flatnonzero(~np.isin(trace.what[stacked], (OP, ANNOTATION)) & ~python)
    for k in loose:
        frames, p = [], parent[k]
        while p >= 0:
            if python[p]:
                frames.append(str(names[p]))
            p = parent[p]
        stack[stacked[k]] = kept(frames)


def _from_operator(trace: Trace, stack: list[tuple[str, ...]], is_op: Bools) -> None:
    """API calls and GPU work linked to an operator take its stack; GPU work launched by an
    unlinked call takes the call's."""
    at = lookup(trace.ext[is_op], np.flatnonzero(is_op), trace.linked, -1)
    for i in np.flatnonzero(np.isin(trace.what, (RUNTIME, GPU)) & (at >= 0)):
        stack[i] = stack[at[i]]
    launch = column(trace.table, "launch_event_id", -1)
    loose = np.flatnonzero((trace.what == GPU) & (at < 0) & (launch >= 0))
    call = lookup(trace.row, np.arange(len(trace.row), dtype=np.int64), launch[loose], -1)
    for i, c in zip(loose, call, strict=True):
        if c >= 0:
            stack[i] = stack[c]


def backward(names: list[str], name: I64, parent: I64, thread: I64, seq: I64, fwd: I64, stack: list[Any]) -> list[Any]:
    """Events under a backward function (an autograd node, scope BACKWARD_FUNCTION) take the
    stack of the first forward event of that node's sequence number on its forward thread."""
    n = len(name)
    node = np.array([names[name[i]] for i in range(n)], dtype=object)
    p = np.maximum(parent, 0)
    scope = (parent >= 0) & (node[p] == np.char.add(EVALUATE, node.astype(str)).astype(object))
    owner = np.where(scope, np.arange(n), -1)
    cur = parent.copy()
    while True:  # the nearest backward function at or above each event
        open_ = (owner < 0) & (cur >= 0)
        if not open_.any():
            break
        hit = open_ & scope[np.maximum(cur, 0)]
        owner[hit] = cur[hit]
        cur = np.where(open_ & ~hit, parent[np.maximum(cur, 0)], -1)
    first: dict[tuple[int, int], Any] = {}
    for i in np.flatnonzero(owner < 0):
        first.setdefault((int(seq[i]), int(thread[i])), stack[i])
    threads = _forward_threads(first, seq, fwd, scope)
    out = list(stack)
    for i in np.flatnonzero(owner >= 0):
        b = owner[i]
        out[i] = first.get((int(seq[b]), threads.get(int(fwd[b]), -1)), ())
    return out


def _forward_threads(first: dict[tuple[int, int], Any], seq: I64, fwd: I64, scope: Bools) -> dict[int, int]:
    """torch's thread ids (``Fwd thread id``) as the trace's: the thread where those sequence numbers ran forward."""
    on: dict[int, set[int]] = {}
    for s, t in first:
        on.setdefault(s, set()).add(t)
    votes: dict[tuple[int, int], int] = {}
    for i in np.flatnonzero(scope & (fwd > 0)):
        for t in on.get(int(seq[i]), ()):
            votes[(int(fwd[i]), t)] = votes.get((int(fwd[i]), t), 0) + 1
    out: dict[int, int] = {}
    for (f, t), _ in sorted(votes.items(), key=lambda kv: -kv[1]):
        out.setdefault(f, t)
    return out
