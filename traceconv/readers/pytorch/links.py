"""Links in a PyTorch trace, exact across chunks, in memory proportional to the API calls only.

- GPU op -> launching API call: ``args.correlation`` (unique per process; a Kineto trace is
  one process).
- API call -> CPU operator: ``External id`` when it names an operator that encloses the call
  on the same thread; otherwise (missing, equal to the correlation id as traces before late
  2024 wrote, or colliding with an unrelated operator) the innermost ``cpu_op`` (else
  ``user_annotation``) enclosing the call on its thread.
- GPU op -> CPU operator: its launching call's; a CUDA graph replay's rows whose capture is in the
  trace, the operator of the call that captured each (:mod:`~traceconv.readers.graph_capture`).

Pass 1 (:meth:`LinkIndex.add`, of the rows :mod:`~traceconv.readers.pytorch.link_rows` picks)
keeps compact arrays for API calls and GPU rows; operators go to a spill
(:class:`~traceconv.readers.pytorch.op_rows.OpRows`: a worker
process writes a chunk's to its own segment file with the chunk's text codes, which are made the
index's as they are read back; the main process receives only the texts). Between
passes (:meth:`LinkIndex.finalize`) the operators stream past the API calls once, batch by batch
(their lookups on threads ahead of the batch applied). Pass 2 (:meth:`LinkIndex.resolve`) fills
the link columns of each batch.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from traceconv import schema as S
from traceconv.process import return_freed_memory
from traceconv.readers.arrow_util import I64, dict_codes, from_codes, to_numpy
from traceconv.readers.gpu_times import queue_and_wall
from traceconv.readers.graph_capture import END, REPLAY, Calls, call_roles, captured_by
from traceconv.readers.pytorch.columns import IS_GPU, KIND_CODE
from traceconv.readers.pytorch.link_rows import FIELDS, Prepared, extract, prepare
from traceconv.readers.pytorch.op_rows import OP_COLUMNS, Codes, coded, op_table
from traceconv.readers.pytorch.operators import Lookups, OperatorResolver, narrow, unique_pairs
from traceconv.readers.sorted_keys import SortedKeys

# A call without a correlation id gets a key that no GPU row's probe (an id, or -1) equals.
NO_CALL = -2
# Operator rows fed to the resolver at once (whole chunks' worth, a few chunks): fewer calls,
# and the pairs of operator and covered API call of one batch in memory.
FEED_ROWS = 32768


class LinkIndex:
    def __init__(self) -> None:
        self.unlaunched = 0  # GPU rows with no launching call in the trace, counted by pass 2
        self.names: list[str | None] = []
        self._name_code: dict[str, int] = {}
        self._api: dict[str, list[I64]] = {f: [] for f in (*dict(FIELDS), "name")}
        self._gpu: dict[str, list[I64]] = {f: [] for f in ("event_id", "corr", "ext", "start")}
        self.process_names: dict[str, str] = {}
        self.thread_names: dict[str, str] = {}
        self.api: dict[str, I64] = {}
        self.gpu: dict[str, I64] = {}
        self._captured: SortedKeys | None = None  # replayed GPU rows whose capture is in the trace
        self._captured_op: tuple[I64, I64] = (np.zeros(0, np.int64), np.zeros(0, np.int64))

    # -- pass 1 ---------------------------------------------------------------------
    def add(self, table: pa.Table, event_offset: int = 0) -> pa.Table | None:
        """Record API and GPU rows; return the operator rows as a small table for the spill."""
        return self.add_parts(prepare(extract(table)), event_offset)

    def add_parts(self, parts: Prepared, event_offset: int = 0) -> pa.Table | None:
        """:meth:`add` for the rows :func:`prepare` made of a chunk (event ids shifted by ``event_offset``)."""
        if "api" in parts:
            self._take(self._api, parts["api"], event_offset)
        if "gpu" in parts:
            sub = parts["gpu"]
            self._gpu["event_id"].append(narrow(sub["event_id"] + event_offset))
            self._gpu["corr"].append(sub["corr"])
            self._gpu["ext"].append(sub["ext"])
            self._gpu["start"].append(sub["start"])
        if "meta" in parts:
            self._names_from_metadata(parts["meta"])
        if "ops" not in parts:
            return None
        rows = parts["ops"]
        return op_table(coded(rows, self.text_codes(rows), event_offset), rows["is_cpu"])

    def _code(self, values: list[str | None]) -> I64:
        out = np.full(len(values), -1, dtype=np.int64)
        for i, v in enumerate(values):
            if v is None:
                continue
            code = self._name_code.get(v)
            if code is None:
                code = self._name_code[v] = len(self.names)
                self.names.append(v)
            out[i] = code
        return out

    def _take(self, store: dict[str, list[I64]], rows: dict[str, Any], event_offset: int) -> None:
        for field, values in coded(rows, self.text_codes(rows), event_offset).items():
            store[field].append(values)

    def text_codes(self, texts: dict[str, Any]) -> Codes:
        """The name codes of a chunk's distinct names, and of its pid and tid labels where it has
        any (new texts get the next codes: called in chunk order)."""
        names = self._code(texts["names"])
        pid, tid = (self._code(texts[f + "_labels"]) if texts[f + "_labels"] else None for f in ("pid", "tid"))
        return names, pid, tid

    def _names_from_metadata(self, meta: list[dict[str, Any]]) -> None:
        for row in meta:
            label = _label(row["args"])
            if label is None:
                continue
            pkey = _key(row["pid"], row["pid_label"])
            if row["name"] == "process_name":
                self.process_names[pkey] = label
            elif row["name"] == "thread_name":
                self.thread_names[pkey + "/" + _key(row["tid"], row["tid_label"])] = label

    # -- between passes -------------------------------------------------------------
    def finalize(self, op_chunks: Iterable[dict[str, I64]], events: int, threads: int = 1) -> None:
        """Link the API calls to their operators (``events``: the trace's number of events). The
        batches' lookups run on ``threads`` threads, ahead of the batch being applied (the one step
        between the passes that needs the whole trace: the workers wait for it)."""
        # Memory grows with the API calls: every array goes as
        # soon as nothing needs it, before the next large one is made.
        self.api, self.gpu = _cat_fields(self._api), _cat_fields(self._gpu)
        replayed = self._graph_replays()
        del self.gpu["start"]
        resolver = OperatorResolver(self.api, self.gpu, events)  # keeps sorted copies of the External ids
        del self.api["ext"], self.gpu["ext"], self.gpu["corr"]
        # Several chunks' operators at a time: larger batches are faster (fewer calls) and take
        # more memory (the pairs of operator and API call each batch expands to).
        try:
            for ops, found in _looked_up(resolver, _batches(op_chunks, FEED_ROWS), threads):
                resolver.apply(ops, found)
            self.api["op_eid"], self.api["op_name"] = resolver.api_result()
            self._capturing_ops(*replayed)
        finally:
            resolver.annotations.close()  # its temporary file, if it needed one, also after an error
        gpu_op = {"op_eid": resolver.gpu_ext_eid, "op_name": resolver.gpu_ext_name}
        del resolver
        # Pass 2 looks rows up through sorted keys; the fields only linking needed go.
        corr = self.api.pop("corr")
        self._by_corr = SortedKeys(np.where(corr >= 0, corr, NO_CALL))  # a GPU row without one probes -1
        del corr, self.api["pid"]
        self._by_api_eid = SortedKeys(self.api["event_id"])
        self._by_gpu_eid = SortedKeys(self.gpu["event_id"])
        # Codes, operator event ids and thread ids in 32 bits where they fit (pass 2 widens what it takes).
        for field in ("name", "op_name", "op_eid", "tid"):
            self.api[field] = narrow(self.api[field])
        self.gpu = {field: narrow(values) for field, values in gpu_op.items()}

    def _graph_replays(self) -> tuple[I64, I64]:
        """The GPU rows of CUDA graph replays whose capture is in the trace (their event ids), and the
        API call (its row of ``api``) that captured each; none without graph launches and instantiations."""
        api, gpu = self.api, self.gpu
        none = np.zeros(0, np.int64)
        codes = np.unique(api["name"][api["name"] >= 0])
        role_of = np.zeros(len(self.names) + 1, np.int8)  # code -1 takes the last: no role
        role_of[codes] = call_roles([self.names[c] for c in codes])
        role = role_of[api["name"]]
        graph = np.flatnonzero((role == REPLAY) & (api["corr"] >= 0))
        if not len(graph) or not (role == END).any():
            return none, none
        at = SortedKeys(api["corr"][graph]).find(gpu["corr"])
        rows = np.flatnonzero(at >= 0)
        thread = unique_pairs(api["pid"], api["tid"])[1].astype(np.int64)
        calls = Calls(thread, api["start"], role, np.isin(api["corr"], gpu["corr"][gpu["corr"] >= 0]))
        captured = captured_by(calls, graph[at[rows]], gpu["start"][rows], gpu["event_id"][rows])
        ok = captured >= 0
        return gpu["event_id"][rows][ok].astype(np.int64), captured[ok]

    def _capturing_ops(self, rows: I64, calls: I64) -> None:
        """Pass 2's operator for replayed GPU ``rows``: that of the call that captured each, where it has one."""
        op, name = self.api["op_eid"][calls], self.api["op_name"][calls]
        ok = op >= 0
        if ok.any():
            self._captured = SortedKeys(rows[ok])
            self._captured_op = (op[ok].astype(np.int64), name[ok].astype(np.int64))

    # -- pass 2 ---------------------------------------------------------------------
    def resolve(self, table: pa.Table, base_ns: int) -> pa.Table:
        n = table.num_rows
        api = self.api
        kind = to_numpy(table["kind"].combine_chunks().indices)
        eid = to_numpy(table["event_id"])
        gpu = IS_GPU[kind]
        corr = to_numpy(table["correlation_id"])
        launch = np.full(n, -1, dtype=np.int64)
        if gpu.any():
            launch[gpu] = self._by_corr.find(corr[gpu])
        own = np.full(n, -1, dtype=np.int64)
        is_api = kind == KIND_CODE["cuda_api"]
        if is_api.any():
            own[is_api] = self._by_api_eid.find(eid[is_api])
        via = np.where(launch >= 0, launch, own)
        op_eid = _gather(api.get("op_eid"), via)
        op_name = _gather(api.get("op_name"), via)
        orphan = gpu & (launch < 0)
        self.unlaunched += int(orphan.sum())
        if orphan.any():
            g = self._by_gpu_eid.find(eid[orphan])
            op_eid[orphan], op_name[orphan] = _gather(self.gpu["op_eid"], g), _gather(self.gpu["op_name"], g)
        if self._captured is not None and gpu.any():
            c = np.full(n, -1, dtype=np.int64)
            c[gpu] = self._captured.find(eid[gpu])
            hit = c >= 0
            op_eid[hit], op_name[hit] = self._captured_op[0][c[hit]], self._captured_op[1][c[hit]]
        cols = {name: table[name] for name in S.NAMES}
        cols["start_ns"] = pc.add(table["start_ns"], base_ns)
        cols["end_ns"] = pc.add(table["end_ns"], base_ns)
        self._launch_columns(cols, launch, base_ns)
        cols["op_event_id"] = pa.array(op_eid, mask=op_eid < 0)
        cols["op_name"] = from_codes(op_name, self.names)
        cols["process_name"], cols["thread_name"] = self._labels(table)
        return S.conform(cols, n)

    def _launch_columns(self, cols: dict[str, Any], launch: I64, base_ns: int) -> None:
        has = launch >= 0
        if not has.any():
            return
        api, li = self.api, np.maximum(launch, 0)

        def pick(values: I64, offset: int = 0) -> pa.Array:
            return pa.array(np.where(has, values[li].astype(np.int64) + offset, 0), mask=~has)

        lstart, lend = pick(api["start"], base_ns), pick(api["end"], base_ns)
        cols["launch_event_id"], cols["launch_tid"] = pick(api["event_id"]), pick(api["tid"])
        cols["launch_name"] = from_codes(np.where(has, api["name"][li], -1), self.names)
        cols["launch_start_ns"], cols["launch_end_ns"] = lstart, lend
        cols["queue_ns"], cols["wall_ns"] = queue_and_wall(cols["start_ns"], cols["end_ns"], lstart, lend)

    def _labels(self, table: pa.Table) -> tuple[pa.Array, pa.Array]:
        """Each row's process and thread name, looked up once per distinct (pid, tid) of the batch."""
        n = table.num_rows
        if n == 0 or (not self.process_names and not self.thread_names):
            return pa.nulls(n, S.DICT), pa.nulls(n, S.DICT)
        pkeys, pcode = _row_keys(table, "pid")
        tkeys, tcode = _row_keys(table, "tid")
        process = _lookup(pcode, [self.process_names.get(k) for k in pkeys])
        pairs, inverse = unique_pairs(pcode, tcode)
        names = [self.thread_names.get(f"{pkeys[p]}/{tkeys[t]}") if p >= 0 and t >= 0 else None for p, t in pairs]
        return process, _lookup(inverse, names)


def _row_keys(table: pa.Table, col: str) -> tuple[list[str], I64]:
    """The key a row's ``pid`` or ``tid`` has in the metadata's names (its label, else its
    number as text): the distinct keys, and each row's index into them (-1: none)."""
    numbers, ncode = dict_codes(table[col].combine_chunks())
    labels, lcode = dict_codes(table[col + "_label"].combine_chunks())
    keys = [str(v) for v in numbers] + [str(v) for v in labels]
    return keys, np.where(lcode >= 0, lcode + len(numbers), ncode)


def _lookup(codes: I64, values: list[str | None]) -> pa.Array:
    """Dictionary array of ``values[code]`` per row (null where the code is -1 or the value None)."""
    labels = sorted({v for v in values if v is not None})
    at = {v: i for i, v in enumerate(labels)}
    lut = np.array([at[v] if v is not None else -1 for v in values] + [-1], dtype=np.int64)
    return from_codes(lut[codes], labels)  # code -1 picks the appended -1


def _gather(values: I64 | None, idx: I64) -> I64:
    if values is None or not len(values):
        return np.full(len(idx), -1, dtype=np.int64)
    return np.where(idx >= 0, values[np.maximum(idx, 0)].astype(np.int64), -1)


def _looked_up(
    resolver: OperatorResolver, batches: Iterable[dict[str, I64]], threads: int
) -> Iterator[tuple[dict[str, I64], Lookups]]:
    """Each batch with its :meth:`~OperatorResolver.lookups`, in order; with several ``threads``, made
    on them up to ``threads`` batches ahead (while this thread reads the next batch and applies the last)."""
    if threads <= 1:
        for ops in batches:
            yield ops, resolver.lookups(ops)
        return
    with ThreadPoolExecutor(threads, thread_name_prefix="traceconv-lookup") as pool:
        ahead: deque[tuple[dict[str, I64], Future[Lookups]]] = deque()
        for ops in batches:
            ahead.append((ops, pool.submit(resolver.lookups, ops)))
            if len(ahead) > threads:
                first, found = ahead.popleft()
                yield first, found.result()
        while ahead:
            first, found = ahead.popleft()
            yield first, found.result()


def _batches(chunks: Iterable[dict[str, I64]], rows: int) -> Iterator[dict[str, I64]]:
    """Consecutive chunks' operators (:meth:`OpRows.__iter__`) as batches of at least ``rows`` rows
    (the last may be smaller), as int64 columns with each row's chunk in the batch (``chunk``: 0, 1
    ...). Gathered a batch at a time: thousands of chunks, each cast on its own, took a tenth of
    the link index's time on a 1 GB trace."""
    held: list[dict[str, I64]] = []
    count = 0

    def batch() -> dict[str, I64]:
        cols = {name: np.concatenate([c[name] for c in held]).astype(np.int64, copy=False) for name in OP_COLUMNS}
        sizes = [len(c["event_id"]) for c in held]
        cols["chunk"] = np.repeat(np.arange(len(held), dtype=np.int64), sizes)
        return cols

    for chunk in chunks:
        held.append(chunk)
        count += len(chunk["event_id"])
        if count >= rows:
            yield batch()
            held, count = [], 0
    if held:
        yield batch()


def _cat_fields(store: dict[str, list[I64]]) -> dict[str, I64]:
    """Each field's chunk arrays as one array, emptying ``store`` as it goes: one field's
    pieces and their concatenation are in memory at once, not every field twice."""
    out = {}
    while store:
        field, parts = store.popitem()
        out[field] = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
        del parts
        return_freed_memory()  # the pieces lie between live data: only a trim gives them back
    return out


def _key(value: int | None, label: str | None) -> str:
    return label if label is not None else ("" if value is None else str(value))


def _label(args_text: str | None) -> str | None:
    if not args_text:
        return None
    try:
        value = orjson.loads(args_text)
    except orjson.JSONDecodeError:
        return None
    name = value.get("name") if isinstance(value, dict) else None
    return name if isinstance(name, str) else None
