"""One decoded chunk of Kineto events -> unified columns (pass 1: everything but the links)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from msgspec.structs import astuple

from traceconv import schema as S
from traceconv.readers.arrow_util import (
    I64,
    from_codes,
    member_table,
    numbers,
    positions,
    raw_texts,
    spread,
    text_is,
    to_numpy,
    utf8,
)
from traceconv.readers.pytorch.decode import Decoded, GpuArgs, MemoryArgs
from traceconv.readers.pytorch.times import times_ns

# category (lower-cased) -> kind. Legacy 2021 names are the capitalised ones.
CATEGORY_KINDS = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "memcpy": "memcpy",
    "gpu_memset": "memset",
    "memset": "memset",
    "cuda_runtime": "cuda_api",
    "cuda_driver": "cuda_api",
    "runtime": "cuda_api",
    "cpu_op": "cpu_op",
    "operator": "cpu_op",
    "user_annotation": "nvtx",
    "gpu_user_annotation": "nvtx",
    "python_function": "python",
    "cuda_sync": "sync",
    "cpu_instant_event": "marker",
    "overhead": "overhead",
}
API_CLASS = {"cuda_runtime": "runtime", "runtime": "runtime", "cuda_driver": "driver"}
KIND_CODE = {k: i for i, k in enumerate(S.KINDS)}  # a kind -> its code in the `kind` column
_API_LABELS = sorted(set(API_CLASS.values()))
_API_CLASS_CODE = {category: _API_LABELS.index(label) for category, label in API_CLASS.items()}
IS_GPU = member_table(len(S.KINDS), [KIND_CODE[k] for k in S.GPU_KINDS])  # IS_GPU[codes]: kernels, copies, sets
_IS_COPY_OR_SET = member_table(len(S.KINDS), [KIND_CODE["memcpy"], KIND_CODE["memset"]])
# Kineto writes correlation and External ids on API calls, GPU ops, operators and annotations:
# Python frames and allocator events (a third of a trace with stacks and memory) are not searched.
_NO_EXTERNAL_ID = member_table(len(S.KINDS), [KIND_CODE["python"], KIND_CODE["memory"]])
_NO_CORRELATION = member_table(len(S.KINDS), [KIND_CODE["python"], KIND_CODE["memory"], KIND_CODE["cpu_op"]])
_COPY = re.compile(r"^Memcpy\s+(\w+)(?:\s*\((\w+)\s*->\s*(\w+)\))?")
_SET = re.compile(r"^Memset\s*\((\w+)\)")


def kind_of(ph: str | None, cat: str | None) -> str:
    if ph in ("s", "f", "t", "M", "C", "b", "e", "n"):
        return "other"
    kind = CATEGORY_KINDS.get((cat or "").lower())
    if kind is not None:
        return kind
    return "marker" if ph in ("i", "I", "R") else "other"


@dataclass
class ChunkContext:
    first_event_id: int
    exact: bool
    unpadded: bool
    repairs: Counter[str] = field(default_factory=Counter)


def build(decoded: Decoded, ctx: ChunkContext) -> pa.Table:
    events = decoded.events
    n = len(events)
    cols: dict[str, pa.Array] = {}
    ph = pa.array([e.ph for e in events], pa.string()).dictionary_encode()
    cat = pa.array([e.cat for e in events], pa.string()).dictionary_encode()
    name = pa.array([e.name for e in events], pa.string()).dictionary_encode()
    kinds, api_class = _kinds(ph, cat, name)
    cols["event_id"] = pa.array(np.arange(ctx.first_event_id, ctx.first_event_id + n, dtype=np.int64))
    cols["kind"] = from_codes(kinds, S.KINDS)
    cols["category"] = cat
    cols["phase"] = ph
    cols["name"] = name
    _ids(cols, [e.pid for e in events], "pid")
    _ids(cols, [e.tid for e in events], "tid")
    start = times_ns([e.ts for e in events], ctx.exact, ctx.unpadded)
    dur = times_ns([e.dur for e in events], ctx.exact, ctx.unpadded)
    dur = pc.if_else(pc.and_(pc.is_null(dur), pc.is_valid(start)), pa.scalar(0, pa.int64()), dur)
    cols["start_ns"], cols["dur_ns"], cols["end_ns"] = start, dur, pc.add(start, dur)
    cols["flow_id"] = numbers([e.id for e in events], pa.int64())
    cols["args"] = _utf8(raw_texts([e.args for e in events]), ctx.repairs)
    cols["correlation_id"] = _arg_int(cols["args"], r'"correlation":\s*(?P<v>-?\d+)', kinds, _NO_CORRELATION)
    cols["external_id"] = _arg_int(
        cols["args"], r'"(?i:external id)":\s*(?P<v>-?\d+)', kinds, _NO_EXTERNAL_ID, usually_first=True
    )
    cols["api_class"] = from_codes(api_class, _API_LABELS)
    _gpu_detail(cols, decoded, kinds, name, n)
    _memory_detail(cols, decoded, kinds, n)
    return S.present(cols, n)


def _utf8(raw: pa.Array, repairs: Counter[str]) -> pa.Array:
    """Arguments as text; invalid UTF-8 (Python frames in older traces) replaced, and counted."""
    text, bad = utf8(raw)
    if bad:
        repairs["invalid UTF-8 bytes replaced"] += bad
    return text


def _arg_int(
    args: pa.Array, pattern: str, kinds: I64, skipped: npt.NDArray[np.bool_], usually_first: bool = False
) -> pa.Array:
    """One integer argument, found by a regular expression over the JSON text (C++ speed), for
    the events not of the ``skipped`` kinds (null for those).

    ``usually_first``: the argument is usually the first in the object (Kineto writes
    ``External id`` first), so the pattern is tried there first: a match anchored at the start
    costs about half a search and is the same leftmost match; only the rows where it fails are
    searched throughout.
    """
    searched = ~skipped[kinds]
    every = bool(searched.all())
    idx = np.flatnonzero(searched)
    args = args if every else args.take(pa.array(idx))
    if usually_first:
        text = pc.struct_field(pc.extract_regex(args, r"^\{\s*" + pattern), [0])
        missed = pc.and_(text.is_null(), args.is_valid())
        if pc.any(missed).as_py():
            rest = pc.struct_field(pc.extract_regex(args.filter(missed), pattern), [0])
            text = pc.replace_with_mask(text, missed, rest)
    else:
        text = pc.struct_field(pc.extract_regex(args, pattern), [0])
    try:
        values = text.cast(pa.int64())
    except pa.ArrowInvalid:  # past int64: null here, kept in the args text
        values = numbers(
            [int(v) if v is not None and -(2**63) <= int(v) < 2**63 else None for v in text.to_pylist()], pa.int64()
        )
    return values if every else spread(values, positions(len(kinds), idx))


def _kinds(ph: pa.DictionaryArray, cat: pa.DictionaryArray, name: pa.DictionaryArray) -> tuple[I64, I64]:
    """Each event's kind code, and its ``api_class`` code (-1 but for CUDA API calls), decided
    once per distinct (phase, category) pair: a table indexed by the two dictionary codes."""
    phases = [p or "" for p in ph.dictionary.to_pylist()] + [""]  # the last entry: null (code -1)
    categories = [*cat.dictionary.to_pylist(), None]
    kind_lut = np.empty((len(phases), len(categories)), dtype=np.int64)
    api_lut = np.empty((len(phases), len(categories)), dtype=np.int64)
    for i, p in enumerate(phases):
        for j, c in enumerate(categories):
            kind_lut[i, j] = KIND_CODE[kind_of(p, c)]
            api_lut[i, j] = _API_CLASS_CODE.get((c or "").lower(), -1)
    ph_code, cat_code = to_numpy(ph.indices), to_numpy(cat.indices)  # -1 (null) picks the last entry
    kinds = kind_lut[ph_code, cat_code]
    names = name.dictionary.to_pylist()
    if "[memory]" in names:
        is_mem = np.asarray(pc.equal(name.indices, names.index("[memory]")).fill_null(False))
        kinds[is_mem] = KIND_CODE["memory"]
    return kinds, np.where(kinds == KIND_CODE["cuda_api"], api_lut[ph_code, cat_code], -1)


def _ids(cols: dict[str, pa.Array], values: list[Any], col: str) -> None:
    """Integer ids (also when written as digits in a string) as int64; anything else kept as a label."""
    try:  # the common case, all integers, at C speed
        cols[col] = pa.array(values, pa.int64())
        cols[col + "_label"] = pa.nulls(len(values), S.DICT)
        return
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        pass
    ints = [_int_id(v) for v in values]
    cols[col] = numbers(ints, pa.int64())
    labels = [None if i is not None or v is None else str(v) for v, i in zip(values, ints, strict=True)]
    cols[col + "_label"] = pa.array(labels, pa.string()).dictionary_encode()


def _int_id(v: Any) -> int | None:
    if type(v) is int:
        return v
    if type(v) is float and v.is_integer():
        return int(v)
    if type(v) is str and v.isdigit() and len(v) < 19:
        return int(v)
    return None


def _gpu_detail(cols: dict[str, pa.Array], decoded: Decoded, kinds: I64, name: pa.DictionaryArray, n: int) -> None:
    gpu = IS_GPU[kinds]
    annot = text_is(cols["category"], "gpu_user_annotation", fold=True)
    idx = np.flatnonzero(gpu | annot)
    if len(idx) == 0:
        return
    args = _arg_columns(decoded, idx, GpuArgs)
    at = pa.array(idx)

    def field(attr: str, typ: pa.DataType) -> pa.Array:
        return numbers(args[attr], typ)

    # The columns at the GPU rows first, then spread to every row in one take.
    sub = {
        "device": pc.coalesce(field("device", pa.int32()), cols["pid"].take(at).cast(pa.int32())),
        "stream": pc.coalesce(field("stream", pa.int64()), _stream_from_tid(cols, idx)),
        "context": field("context", pa.int64()),
    }
    for axis, grid, block in zip("xyz", _elements(args["grid"], 3), _elements(args["block"], 3), strict=True):
        sub[f"grid_{axis}"], sub[f"block_{axis}"] = grid, block
    sub["registers_per_thread"] = field("registers", pa.int32())
    sub["shared_memory_bytes"] = field("shared_memory", pa.int64())
    sub["blocks_per_sm"] = field("blocks_per_sm", pa.float64())
    sub["warps_per_sm"] = field("warps_per_sm", pa.float64())
    sub["occupancy_pct"] = pc.coalesce(field("occupancy", pa.float64()), field("theoretical_occupancy", pa.float64()))
    sub["bytes"] = field("bytes", pa.int64())
    sub["src_device"] = field("from_device", pa.int32())
    sub["dst_device"] = field("to_device", pa.int32())
    dur = cols["dur_ns"].take(at)
    computed = pc.divide(pc.cast(sub["bytes"], pa.float64()), pc.if_else(pc.greater(dur, 0), dur, None))
    sub["bandwidth_gbps"] = pc.coalesce(field("bandwidth", pa.float64()), computed)
    batch = pa.RecordBatch.from_pydict(sub)
    pos = positions(n, idx)
    cols.update(zip(batch.schema.names, (batch if pos is None else batch.take(pos)).columns, strict=True))
    _copy_kinds(cols, name, kinds)


def _stream_from_tid(cols: dict[str, pa.Array], idx: I64) -> pa.Array:
    tid = cols["tid"].take(pa.array(idx))
    label = cols["tid_label"].take(pa.array(idx)).cast(pa.string())
    digits = pc.extract_regex(label, r"^stream\s*(?P<s>\d+)")
    from_label = pc.struct_field(digits, [0]).cast(pa.int64())
    return pc.coalesce(tid, from_label)


def _copy_kinds(cols: dict[str, pa.Array], name: pa.DictionaryArray, kinds: I64) -> None:
    distinct = name.dictionary.to_pylist()
    parsed: list[tuple[str | None, str | None, str | None]] = []
    for text in distinct:
        m = _COPY.match(text or "")
        if m:
            parsed.append((m.group(1), m.group(2), m.group(3)))
            continue
        m = _SET.match(text or "")
        parsed.append((None, None, m.group(1)) if m else (None, None, None))
    codes = np.asarray(name.indices.fill_null(-1), dtype=np.int64)
    copyish = _IS_COPY_OR_SET[kinds] & (codes >= 0)
    for col, k in (("copy_kind", 0), ("src_kind", 1), ("dst_kind", 2)):
        values = [p[k] for p in parsed]
        labels = sorted({v for v in values if v is not None})
        lut = np.array([labels.index(v) if v is not None else -1 for v in values] or [-1], dtype=np.int64)
        out = np.where(copyish, lut[np.maximum(codes, 0)], -1)
        cols[col] = from_codes(out, labels)


def _memory_detail(cols: dict[str, pa.Array], decoded: Decoded, kinds: I64, n: int) -> None:
    idx = np.flatnonzero(kinds == KIND_CODE["memory"])
    if len(idx) == 0:
        return
    args = _arg_columns(decoded, idx, MemoryArgs)
    pos = positions(n, idx)

    def field(attr: str, typ: pa.DataType) -> pa.Array:
        return spread(numbers(args[attr], typ), pos)

    cols["bytes"] = pc.coalesce(cols.get("bytes", pa.nulls(n, pa.int64())), field("bytes", pa.int64()))
    cols["total_allocated_bytes"] = field("total_allocated", pa.int64())
    cols["total_reserved_bytes"] = field("total_reserved", pa.int64())
    device = field("device_id", pa.int32())
    device = pc.if_else(pc.less(device, 0), None, device)
    cols["device"] = pc.coalesce(cols.get("device", pa.nulls(n, pa.int32())), device)


def _arg_columns(decoded: Decoded, idx: I64, cls: type[GpuArgs] | type[MemoryArgs]) -> dict[str, Sequence[Any]]:
    """The typed arguments of the events at ``idx`` (non-empty), field by field (one transposition, no getattr loop)."""
    fields = cls.__struct_fields__
    none = (None,) * len(fields)
    rows = [astuple(a) if a is not None else none for a in decoded.typed_args(idx.tolist(), cls)]
    return dict(zip(fields, zip(*rows, strict=True), strict=True))


_LIST = pa.list_(pa.int64())


def _elements(values: Sequence[Any], count: int) -> list[pa.Array]:
    """Elements ``0..count-1`` of list values (grid, block) as int32 arrays; null where absent
    or not an int32. The lists are converted once for all the elements."""
    try:  # the common case: integer lists as long as Kineto writes them, converted at C speed
        arr = pa.array(values, _LIST)
        shortest = pc.min(pc.list_value_length(arr)).as_py()
        if shortest is None or shortest >= count:
            return [pc.list_element(arr, k).cast(pa.int32()) for k in range(count)]
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        pass
    return [
        numbers([v[k] if isinstance(v, list) and len(v) > k else None for v in values], pa.int32())
        for k in range(count)
    ]
