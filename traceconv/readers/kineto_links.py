"""Links in a PyTorch trace, exact across chunks: a compact index filled in pass 1, applied in pass 2.

- GPU op -> launching API call: ``args.correlation`` (unique per process; a Kineto trace is
  one process).
- API call -> CPU operator: ``External id`` when it names an operator that encloses the call
  on the same thread; otherwise (missing, equal to the correlation id as traces before late
  2024 wrote, or colliding with an unrelated operator) the innermost ``cpu_op`` (else
  ``user_annotation``) enclosing the call on its thread.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traceconv import schema as S
from traceconv.readers.arrow_util import I64, dict_codes, from_codes, to_numpy
from traceconv.readers.links import innermost_enclosing, lookup

_K = {k: i for i, k in enumerate(S.KINDS)}
_FIELDS = ("event_id", "corr", "ext", "pid", "tid", "start", "end", "name")


class LinkIndex:
    def __init__(self) -> None:
        self.names: list[str | None] = []
        self._name_code: dict[str | None, int] = {}
        self._api: dict[str, list[I64]] = {f: [] for f in _FIELDS}
        self._ops: dict[str, list[I64]] = {f: [] for f in (*_FIELDS, "is_cpu")}
        self.process_names: dict[str, str] = {}
        self.thread_names: dict[str, str] = {}
        self.api: dict[str, I64] = {}
        self.ops: dict[str, I64] = {}
        self.api_op = np.empty(0, dtype=np.int64)

    # -- pass 1 ---------------------------------------------------------------------
    def add(self, table: pa.Table) -> None:
        kind = to_numpy(table["kind"].combine_chunks().indices)
        cat = pc.utf8_lower(pc.fill_null(table["category"].cast(pa.string()), "")).combine_chunks()
        is_api = kind == _K["cuda_api"]
        is_cpu = kind == _K["cpu_op"]
        is_annot = np.asarray(pc.equal(cat, "user_annotation"))
        self._take(self._api, table, is_api)
        is_op = is_cpu | is_annot
        self._take(self._ops, table, is_op)
        self._ops["is_cpu"].append(is_cpu[is_op].astype(np.int64))
        self._names_from_metadata(table)

    def _code(self, values: list[str | None]) -> I64:
        out = np.empty(len(values), dtype=np.int64)
        for i, v in enumerate(values):
            if v is None:
                out[i] = -1
                continue
            code = self._name_code.get(v)
            if code is None:
                code = self._name_code[v] = len(self.names)
                self.names.append(v)
            out[i] = code
        return out

    def _take(self, store: dict[str, list[I64]], table: pa.Table, mask: Any) -> None:
        if not mask.any():
            return
        sub = table.filter(pa.array(mask))
        distinct, codes = dict_codes(sub["name"].combine_chunks())
        lut = self._code(distinct)
        store["name"].append(np.where(codes >= 0, lut[np.maximum(codes, 0)] if len(lut) else -1, -1))
        for field, col in (("event_id", "event_id"), ("corr", "correlation_id"), ("ext", "external_id"),
                           ("pid", "pid"), ("tid", "tid"), ("start", "start_ns"), ("end", "end_ns")):
            store[field].append(to_numpy(sub[col]))

    def _names_from_metadata(self, table: pa.Table) -> None:
        meta = table.filter(pc.equal(table["phase"].cast(pa.string()), "M"))
        if meta.num_rows == 0:
            return
        for row in meta.select(["name", "pid", "tid", "pid_label", "tid_label", "args"]).to_pylist():
            label = _thread_label(row["args"])
            if label is None:
                continue
            pkey = _key(row["pid"], row["pid_label"])
            if row["name"] == "process_name":
                self.process_names[pkey] = label
            elif row["name"] == "thread_name":
                self.thread_names[pkey + "/" + _key(row["tid"], row["tid_label"])] = label

    # -- between passes -------------------------------------------------------------
    def finalize(self) -> None:
        self.api = {f: _cat(v) for f, v in self._api.items()}
        self.ops = {f: _cat(v) for f, v in self._ops.items()}
        self._api = self._ops = {}  # type: ignore[assignment]
        self.api_op = self._resolve_ops()

    def _resolve_ops(self) -> I64:
        api, ops = self.api, self.ops
        n = len(api["event_id"])
        result = np.full(n, -1, dtype=np.int64)
        if n == 0 or len(ops["event_id"]) == 0:
            return result
        usable = (api["ext"] >= 0) & (api["ext"] != api["corr"])
        cand = np.where(usable, lookup(api["ext"], ops["ext"]), -1)
        c = np.maximum(cand, 0)
        same_thread = (ops["pid"][c] == api["pid"]) & (ops["tid"][c] == api["tid"])
        encloses = (ops["start"][c] <= api["start"]) & (api["start"] <= ops["end"][c])
        result = np.where((cand >= 0) & same_thread & encloses, cand, -1)
        todo = np.flatnonzero(result < 0)
        if len(todo):
            groups = _groups(ops["pid"], ops["tid"], api["pid"][todo], api["tid"][todo])
            for want_cpu in (1, 0):
                sel = np.flatnonzero(ops["is_cpu"] == want_cpu)
                left = todo[result[todo] < 0]
                if len(left) == 0 or len(sel) == 0:
                    continue
                g_ops, g_q = groups[0][sel], groups[1][np.searchsorted(todo, left)]
                found = innermost_enclosing(g_ops, ops["start"][sel], ops["end"][sel], g_q, api["start"][left])
                result[left] = np.where(found >= 0, sel[np.maximum(found, 0)], -1)
        return result

    # -- pass 2 ---------------------------------------------------------------------
    def resolve(self, table: pa.Table, base_ns: int) -> pa.Table:
        n = table.num_rows
        api, ops = self.api, self.ops
        kind = to_numpy(table["kind"].combine_chunks().indices)
        eid = to_numpy(table["event_id"])
        gpu = np.isin(kind, [_K[k] for k in S.GPU_KINDS])
        corr = to_numpy(table["correlation_id"])
        launch = np.full(n, -1, dtype=np.int64)
        if gpu.any() and len(api["corr"]):
            launch[gpu] = lookup(corr[gpu], np.where(api["corr"] >= 0, api["corr"], -2))
        is_api = kind == _K["cuda_api"]
        own = np.full(n, -1, dtype=np.int64)
        if is_api.any():
            own[is_api] = lookup(eid[is_api], api["event_id"])
        op = np.where(launch >= 0, self.api_op[np.maximum(launch, 0)] if len(self.api_op) else -1, -1)
        op = np.where(own >= 0, self.api_op[np.maximum(own, 0)] if len(self.api_op) else -1, op)
        op = self._op_from_own_external_id(table, gpu & (launch < 0), corr, op)
        cols = {name: table[name] for name in S.NAMES}
        has = launch >= 0
        li = np.maximum(launch, 0)

        def pick(values: I64, mask: Any, offset: int = 0) -> pa.Array:
            return pa.array(np.where(mask, values[li] + offset if len(values) else 0, 0), mask=~mask)

        lstart = pick(api["start"], has, base_ns) if len(api["start"]) else pa.nulls(n, pa.int64())
        lend = pick(api["end"], has, base_ns) if len(api["end"]) else pa.nulls(n, pa.int64())
        cols["start_ns"] = pc.add(table["start_ns"], base_ns)
        cols["end_ns"] = pc.add(table["end_ns"], base_ns)
        if len(api["event_id"]):
            cols["launch_event_id"] = pick(api["event_id"], has)
            cols["launch_tid"] = pick(api["tid"], has)
            cols["launch_name"] = from_codes(np.where(has, api["name"][li], -1), self.names)
        cols["launch_start_ns"], cols["launch_end_ns"] = lstart, lend
        queue = pc.subtract(cols["start_ns"], lend)
        cols["queue_ns"] = pc.if_else(pc.greater_equal(queue, 0), queue, None)
        cols["wall_ns"] = pc.subtract(pc.max_element_wise(lend, cols["end_ns"]), lstart)
        oi = np.maximum(op, 0)
        if len(ops["event_id"]):
            cols["op_event_id"] = pa.array(np.where(op >= 0, ops["event_id"][oi], 0), mask=op < 0)
            cols["op_name"] = from_codes(np.where(op >= 0, ops["name"][oi], -1), self.names)
        cols["process_name"], cols["thread_name"] = self._labels(table)
        return S.conform(cols, n)

    def _op_from_own_external_id(self, table: pa.Table, mask: Any, corr: I64, op: I64) -> I64:
        """GPU work with no launch in the trace: its own External id, unless it only repeats the correlation."""
        if not mask.any() or len(self.ops["ext"]) == 0:
            return op
        ext = to_numpy(table["external_id"])
        usable = mask & (ext >= 0) & (ext != corr)
        found = lookup(ext[usable], self.ops["ext"])
        out = op.copy()
        out[np.flatnonzero(usable)] = found
        return out

    def _labels(self, table: pa.Table) -> tuple[pa.Array, pa.Array]:
        n = table.num_rows
        if not self.process_names and not self.thread_names:
            return pa.nulls(n, S.DICT), pa.nulls(n, S.DICT)
        pkey = pc.coalesce(table["pid_label"].cast(pa.string()), table["pid"].cast(pa.string()))
        tkey = pc.binary_join_element_wise(
            pkey, pc.coalesce(table["tid_label"].cast(pa.string()), table["tid"].cast(pa.string())), "/")
        out = []
        for keys, mapping in ((pkey, self.process_names), (tkey, self.thread_names)):
            pos = pc.index_in(keys, value_set=pa.array(list(mapping), pa.string()))
            out.append(pa.array(list(mapping.values()), pa.string()).take(pos).combine_chunks().dictionary_encode()
                       if isinstance(pos, pa.ChunkedArray) else
                       pa.array(list(mapping.values()), pa.string()).take(pos).dictionary_encode())
        return out[0], out[1]


def _cat(parts: list[I64]) -> I64:
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


def _groups(op_pid: I64, op_tid: I64, q_pid: I64, q_tid: I64) -> tuple[I64, I64]:
    """One int64 code per (pid, tid) pair, shared by ops and queries."""
    pid = np.concatenate([op_pid, q_pid])
    tid = np.concatenate([op_tid, q_tid])
    _, pid_code = np.unique(pid, return_inverse=True)
    _, tid_code = np.unique(tid, return_inverse=True)
    codes = pid_code.reshape(-1).astype(np.int64) * (int(tid_code.max()) + 1) + tid_code.reshape(-1)
    return codes[: len(op_pid)], codes[len(op_pid):]


def _key(value: int | None, label: str | None) -> str:
    return label if label is not None else ("" if value is None else str(value))


def _thread_label(args_text: str | None) -> str | None:
    if not args_text:
        return None
    import orjson

    try:
        value = orjson.loads(args_text)
    except orjson.JSONDecodeError:
        return None
    name = value.get("name") if isinstance(value, dict) else None
    return name if isinstance(name, str) else None
