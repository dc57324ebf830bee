"""``NVTX_EVENTS`` -> kinds ``nvtx`` (ranges), ``marker`` (marks) and ``other`` (domain, category, ...).

Push/pop ranges (59) hold their start and end in one row; start/end ranges (60) may end on
another thread (``endGlobalTid``, kept in args) or never (``end`` null); marks (34) are
instants. The text is in ``text`` or, interned, in ``textId``. Domain names come from the
domain-create rows (75) of the same process; the default domain (id 0) has none.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traceconv.readers.arrow_util import I64
from traceconv.readers.nsys.parts import (
    NO_TIME,
    NONE,
    Bools,
    Col,
    DictCol,
    Part,
    Strings,
    arrow,
    as_dict,
    column,
    constant,
    decode_pid,
    decode_tid,
    dictionary,
    global_pid,
    ints,
    json_args,
    leftover,
    times,
)
from traceconv.readers.nsys.sql import Database
from traceconv.readers.sorted_keys import lookup

NVTX = "NVTX_EVENTS"
MARK, PUSH_POP, START_END, DOMAIN_CREATE = 34, 59, 60, 75
_KINDS = ["nvtx", "marker", "other"]
_USED = frozenset({"start", "end", "eventType", "text", "textId", "globalTid", "domainId"})


OPEN_RANGES = "{:,} NVTX start/end ranges never ended: their end_ns and dur_ns are null"


def nvtx_columns(db: Database) -> list[str]:
    have = db.columns(NVTX)
    return [c for c, typ in have.items() if c in _USED or (typ != "TEXT" and c != "jsonTextId")]


def nvtx(t: pa.Table, strings: Strings, domains: Domains) -> Part:
    n = t.num_rows
    etype, start, end = ints(t, "eventType"), times(t, "start"), times(t, "end")
    open_end = end == NO_TIME
    gtid = ints(t, "globalTid")
    gpid = global_pid(gtid)
    name = _text(t, strings)
    ranged = (etype == PUSH_POP) | (etype == START_END)
    instant = ~ranged & ((etype == MARK) | open_end)
    end = np.where(instant, start, end)
    kind = np.where(ranged, 0, np.where(etype == MARK, 1, 2)).astype(np.int64)
    cols: dict[str, Col] = {
        "kind": pa.DictionaryArray.from_arrays(arrow(kind.astype(np.int32)), pa.array(_KINDS)),
        "category": constant(n, NVTX),
        "phase": pa.DictionaryArray.from_arrays(pa.array(instant.astype(np.int32)), pa.array(["X", "i"])),
        "name": name,
        "pid": decode_pid(gtid),
        "tid": decode_tid(gtid),
        "domain": domains.names(gpid, ints(t, "domainId")),
    }
    args = json_args(t, leftover(t, _USED))
    if args is not None:
        cols["args"] = args
    part = Part(NVTX, cols, start, end, gtid, gpid, np.full(n, NONE, dtype=np.int64), (etype == PUSH_POP) & ~open_end)
    open_ranges = int(((etype == START_END) & open_end).sum())
    if open_ranges:
        part.tallies[OPEN_RANGES] = open_ranges
    return part


def _text(t: pa.Table, strings: Strings) -> DictCol:
    interned = strings.names(ints(t, "textId")).cast(pa.string())
    text = column(t, "text")
    merged = pc.coalesce(text, interned) if text is not None else interned
    return as_dict(pc.dictionary_encode(merged))


class Domains:
    """The NVTX domains of an export: the domain-create rows (75) of the whole table, read once,
    so that each batch of NVTX rows finds the names of its domains."""

    def __init__(self, db: Database, strings: Strings) -> None:
        wanted = [c for c in ("globalTid", "domainId", "text", "textId") if c in db.columns(NVTX)]
        where = f"[eventType] = {DOMAIN_CREATE} AND [domainId] > 0" if "domainId" in wanted else "0"
        t = db.read(NVTX, wanted, where=where) if "eventType" in db.columns(NVTX) else pa.table({})
        self.gpid, self.domain = global_pid(ints(t, "globalTid")), ints(t, "domainId")
        self.labels: list[str | None] = _text(t, strings).cast(pa.string()).to_pylist() if t.num_rows else []

    def names(self, gpid: I64, domain: I64) -> DictCol:
        """Name of each row's domain: the text of the first domain-create row with the same process and id."""
        n = len(domain)
        if n == 0 or not self.labels:
            return dictionary(np.full(n, -1, dtype=np.int64), [], np.zeros(0, dtype=bool))
        procs = np.unique(self.gpid)
        at = np.minimum(np.searchsorted(procs, gpid), len(procs) - 1)
        known = (procs[at] == gpid) & (domain > 0)
        span = int(max(self.domain.max(), domain.max())) + 1
        key = np.where(known, at * span + np.maximum(domain, 0), -1)
        created = np.searchsorted(procs, self.gpid) * span + self.domain
        pos = lookup(key, created)
        valid: Bools = np.ones(len(self.labels) + 1, dtype=bool)
        codes = np.where((pos >= 0) & known, pos, len(self.labels)).astype(np.int64)
        return dictionary(codes, [*self.labels, None], valid)
