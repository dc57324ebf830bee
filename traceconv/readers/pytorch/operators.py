"""Each CUDA API call's CPU operator, found while the operators stream past the calls once.

An API call's operator is, in order of preference: the first operator (in the trace's order)
its External id names, if that operator encloses the call on its thread; the innermost
enclosing ``cpu_op``; the innermost enclosing user annotation. The calls are the query points
of one :class:`~traceconv.readers.enclosing.Innermost`; an External-id match settles its call
(no enclosing operator replaces it). Annotations wait in a spill until every ``cpu_op`` has
been seen: they only go to the calls that no ``cpu_op`` encloses. GPU rows whose launching
call is not in the trace get the operator their own External id names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from traceconv.readers.arrow_util import I64, Ints, to_numpy
from traceconv.readers.enclosing import DECIDED, Innermost, Points, spans
from traceconv.readers.pytorch.spill import Spill

ANNOTATION_FIELDS = ("event_id", "pid", "tid", "start", "end", "name")  # the link index's own field names
_INT32 = np.iinfo(np.int32)
_HALF = 1 << 31  # a 32-bit id shifted to be non-negative: the low half of a packed (pid, tid) key


Pairs = tuple[I64, I64]  # (operator row, call or GPU row) for every id that names one
Covered = tuple[I64, I64, I64]  # operator rows, and the run [lo, hi) of sorted calls each covers


@dataclass(frozen=True)
class Lookups:
    """What a batch of operators finds among the calls and GPU rows (:meth:`OperatorResolver.lookups`)."""

    ext: Pairs  # calls named by an operator's External id
    gpu: Pairs  # GPU rows named by one
    cpu: npt.NDArray[np.bool_]  # the rows that are ``cpu_op`` (the others are annotations)
    covered: Covered | None  # the calls each cpu_op covers on its thread


class OperatorResolver:
    """Streams operator batches past the API calls (see the module's docstring).

    ``api`` and ``gpu`` are the link index's columns (``event_id``, ``corr``, ``ext``, ``pid``,
    ``tid``, ``start``, ``end``, ``name``); ``events`` bounds the trace's event ids.
    """

    def __init__(self, api: dict[str, I64], gpu: dict[str, I64], events: int) -> None:
        self.api = api
        n = len(api["event_id"])
        # Event ids and name codes in 32 bits where they fit: this state is the peak of the
        # whole conversion on traces with many API calls.
        ids = id_type(events)
        self.ext_q = IdMatches(api["ext"], (api["ext"] >= 0) & (api["ext"] != api["corr"]))
        self.gpu_q = IdMatches(gpu["ext"], (gpu["ext"] >= 0) & (gpu["ext"] != gpu["corr"]))
        self.gpu_ext_eid = np.full(len(gpu["event_id"]), -1, ids)
        self.gpu_ext_name = np.full(len(gpu["event_id"]), -1, np.int32)
        self.best = Innermost(n, [ids, np.int32])
        self.annotations = Spill()
        self.threads: dict[tuple[int, int], int] = {}
        for pair in unique_pairs(api["pid"], api["tid"])[0] if n else []:
            self.threads[pair] = len(self.threads)
        self.points = Points(self._thread_codes(api["pid"], api["tid"]), api["start"], reuse_group=True)

    def feed(self, ops: dict[str, I64]) -> None:
        """One batch of operators: one chunk's, or several chunks' with each row's ``chunk`` (0, 1
        ...): the result is that of the chunks fed one by one (an earlier chunk's operator wins
        a tie with a later one's; in one chunk the later row wins)."""
        self.apply(ops, self.lookups(ops))

    def lookups(self, ops: dict[str, I64]) -> Lookups:
        """What :meth:`apply` needs of a batch that feeding does not change (the calls and GPU rows its
        External ids name, the calls each ``cpu_op`` covers): batches ahead of the one being applied
        can be looked up on other threads (binary searches, which let go of the GIL)."""
        cpu = ops["is_cpu"] == 1
        return Lookups(
            self.ext_q.matches(ops["ext"]), self.gpu_q.matches(ops["ext"]), cpu, self._covered(ops, np.flatnonzero(cpu))
        )

    def apply(self, ops: dict[str, I64], found: Lookups) -> None:
        """:meth:`feed` with the batch's :meth:`lookups` made: batch after batch, in the trace's order."""
        self._ext(ops, found)
        self._offer(ops, found.covered)
        if not found.cpu.all():
            rows = ~found.cpu
            fields = (*ANNOTATION_FIELDS, "chunk") if "chunk" in ops else ANNOTATION_FIELDS
            self.annotations.append(pa.table({name: ops[name][rows] for name in fields}))

    def _ext(self, ops: dict[str, I64], found: Lookups) -> None:
        api, best = self.api, self.best
        op_i, j = found.ext
        ok = (
            (ops["pid"][op_i] == api["pid"][j])
            & (ops["tid"][op_i] == api["tid"][j])
            & (ops["start"][op_i] <= api["start"][j])
            & (api["start"][j] <= ops["end"][op_i])
            & (best.start[j] != DECIDED)
        )
        j, op_i = _first_chunk_wins(j[ok], op_i[ok], ops.get("chunk"))
        best.decide(j, [ops["event_id"][op_i], ops["name"][op_i]])
        op_i, g = found.gpu
        free = self.gpu_ext_eid[g] < 0
        g, op_i = _first_chunk_wins(g[free], op_i[free], ops.get("chunk"))
        self.gpu_ext_eid[g], self.gpu_ext_name[g] = ops["event_id"][op_i], ops["name"][op_i]

    def _enclosing(self, ops: dict[str, I64], rows: I64) -> None:
        """Offer the operators at ``rows`` to the calls they enclose."""
        self._offer(ops, self._covered(ops, rows))

    def _covered(self, ops: dict[str, I64], rows: I64) -> Covered | None:
        """The operators at ``rows`` that can enclose a call, and the run of sorted calls each covers."""
        if not self.points.n or not len(rows):
            return None
        code = self._thread_codes(ops["pid"][rows], ops["tid"][rows])
        keep = (code >= 0) & (ops["end"][rows] >= ops["start"][rows])
        live, code = rows[keep], code[keep]
        lo, hi = self.points.covered(code, ops["start"][live], ops["end"][live])
        return live, lo, hi

    def _offer(self, ops: dict[str, I64], covered: Covered | None) -> None:
        if covered is None:
            return
        live, lo, hi = covered
        tie = -ops["chunk"][live] if "chunk" in ops else None  # equal ranges: the earliest chunk's
        start, end = ops["start"][live], ops["end"][live]
        self.best.offer(self.points, lo, hi, start, end, [ops["event_id"][live], ops["name"][live]], tie)

    def _thread_codes(self, pid: I64, tid: I64) -> I64:
        if not len(pid):
            return np.empty(0, np.int64)
        pairs, inverse = unique_pairs(pid, tid)
        lut = np.array([self.threads.get((int(p), int(t)), -1) for p, t in pairs], dtype=np.int64)
        return lut[inverse]

    def api_result(self) -> tuple[Ints, Ints]:
        """Each API call's operator (event id, name code; -1: none), once every batch is fed."""
        self.best.settle_found()  # an External id or a cpu_op: no annotation replaces it
        for table in self.annotations:
            ops = {name: to_numpy(table[name]) for name in table.column_names}
            self._enclosing(ops, np.arange(table.num_rows))
        eid, name = self.best.values
        return eid, name


def _first_chunk_wins(j: Ints, op_i: Ints, chunk: Ints | None) -> tuple[Ints, Ints]:
    """Of the pairs (point ``j``, operator ``op_i``) naming one point, the one that feeding chunk
    by chunk keeps: the earliest chunk's, and in it the last (a later assignment wins)."""
    if chunk is None or len(j) < 2:
        return j, op_i
    order = np.lexsort((-chunk[op_i], j))  # per point, its earliest chunk's pairs last, in row order
    j, op_i = j[order], op_i[order]
    last = np.append(j[1:] != j[:-1], True)
    return j[last], op_i[last]


class IdMatches:
    """Sorted query ids, to find every query equal to a probe id."""

    def __init__(self, keys: I64, valid: Any) -> None:
        idx = np.flatnonzero(valid)
        order = np.argsort(keys[idx], kind="stable")
        # int64 like the probes (the operators' ids): searching narrower keys would widen them on every call
        self.idx, self.keys = idx[order].astype(id_type(len(keys))), keys[idx][order].astype(np.int64)

    def matches(self, probe: I64) -> tuple[I64, I64]:
        """(probe index, query index) for every equal pair."""
        if not len(self.keys):
            return np.empty(0, np.int64), np.empty(0, np.int64)
        ok = np.flatnonzero(probe >= 0)
        lo = np.searchsorted(self.keys, probe[ok], "left")
        hi = np.searchsorted(self.keys, probe[ok], "right")
        owner, pos = spans(lo, hi)
        return ok[owner], self.idx[pos]


def unique_pairs(pid: Ints, tid: Ints) -> tuple[list[tuple[int, int]], Ints]:
    """Distinct (pid, tid) pairs and each row's index into them.

    Ids that fit in 32 bits (all real ones but legacy 64-bit thread ids) are packed into one
    int64 (pid in the high half, tid + 2**31 in the low one) and hashed (Arrow's dictionary
    encoding: no sort, and only 32-bit indices besides the packed keys), many times faster
    than numpy's unique over rows.
    """
    fits = pid.min() >= -_HALF and pid.max() < _HALF and tid.min() >= -_HALF and tid.max() < _HALF
    if fits:
        packed = pid.astype(np.int64)  # a copy: shifted and added to in place
        packed <<= 32
        packed += tid
        packed += _HALF
        encoded = pc.dictionary_encode(pa.array(packed))
        del packed
        keys = encoded.dictionary.to_numpy()
        pairs = list(zip((keys >> 32).tolist(), ((keys & 0xFFFFFFFF) - _HALF).tolist(), strict=True))
        return pairs, encoded.indices.to_numpy()
    rows, inverse = np.unique(np.stack([pid.astype(np.int64), tid.astype(np.int64)], 1), axis=0, return_inverse=True)
    return [(int(p), int(t)) for p, t in rows.tolist()], inverse.reshape(-1)


def id_type(bound: int) -> type[np.signedinteger[Any]]:
    """The integer type for values in ``[-1, bound)``: 32 bits where they fit."""
    return np.int32 if bound <= _INT32.max else np.int64


def narrow(values: I64) -> I64:
    """``values`` as int32 if every one fits (half the memory), else as they are."""
    if len(values) and (values.min() < _INT32.min or values.max() > _INT32.max):
        return values
    return values.astype(np.int32, copy=False)
