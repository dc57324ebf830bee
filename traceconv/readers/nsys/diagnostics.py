"""``DIAGNOSTIC_EVENT`` -> instants of kind ``other``: Nsight Systems' own messages.

The profiler's log of the session ("Profiling has started.", "No CUDA events collected. Does
the process use CUDA?", the number of events it collected), from 2024.6 on. ``name`` is the
message; ``severity``, ``source`` and ``timestampType`` (which clock took the time: target or
host) go into args as their labels, with the ``timestamp`` as written. Messages about the
whole session have a negative ``globalPid``: they belong to no process.

Host-clock times are not on the session's timeline: every 2025.3 export of the corpus puts
"Number of CUDA events collected", written once collection ended, 10-660 ms after the session
start, before CUDA was even initialised. Those messages get no start_ns/end_ns.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traceconv.errors import InputError
from traceconv.readers.arrow_util import I64
from traceconv.readers.nsys.enums import Enums, labelled
from traceconv.readers.nsys.parts import (
    NO_TIME,
    NONE,
    Col,
    DictCol,
    Part,
    column,
    constant,
    decode_pid,
    ints,
    json_args,
    leftover,
    times,
)
from traceconv.readers.nsys.sql import Database
from traceconv.readers.nsys.tables import wanted_columns

DIAGNOSTIC = "DIAGNOSTIC_EVENT"
_USED = frozenset({"text", "globalPid", "severity", "source", "timestampType"})
HOST_TIMESTAMP = 2  # ENUM_DIAGNOSTIC_TIMESTAMP_SOURCE, the same in every version that has the table


def diagnostic_columns(db: Database) -> list[str]:
    return wanted_columns(db, DIAGNOSTIC, frozenset())  # args hold numbers and enum labels; the text is read apart


def diagnostics(t: pa.Table, db: Database, enums: Enums) -> Part:
    have = db.columns(DIAGNOSTIC)
    n = t.num_rows
    g = ints(t, "globalPid")
    gpid = np.where(g >= 0, g, NONE)
    cols: dict[str, Col] = {
        "kind": constant(n, "other"),
        "category": constant(n, DIAGNOSTIC),
        "phase": constant(n, "i"),
        "name": pc.dictionary_encode(_messages(db, n)) if "text" in have else pa.nulls(n, pa.string()),
        "pid": decode_pid(gpid),
    }
    args = json_args(t, leftover(t, _USED), _labels(t, enums))
    if args is not None:
        cols["args"] = args
    at: I64 = np.where(ints(t, "timestampType") == HOST_TIMESTAMP, NO_TIME, times(t, "timestamp"))
    none = np.full(n, NONE, dtype=np.int64)
    return Part(DIAGNOSTIC, cols, at, at.copy(), none, gpid, none.copy())


def _labels(t: pa.Table, enums: Enums) -> dict[str, DictCol]:
    coded = {"severity": enums.severity, "source": enums.diagnostic_source, "timestampType": enums.timestamp_source}
    return {name: labelled(col, labels) for name, labels in coded.items() if (col := column(t, name)) is not None}


def _messages(db: Database, n: int) -> Col:
    """The texts, with invalid UTF-8 replaced (the connection's decoding), not refused: a damaged
    message is no reason to lose the profile. A few dozen rows: read through Python."""
    rows = db.rows(DIAGNOSTIC, f"SELECT text FROM [{DIAGNOSTIC}] ORDER BY rowid")
    if len(rows) != n:
        raise InputError(db.path, f"table {DIAGNOSTIC} changed while it was read", "convert a copy of it")
    return pa.array([v if isinstance(v, str) or v is None else str(v) for (v,) in rows], pa.string())
