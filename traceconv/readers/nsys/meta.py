"""Trace-level facts of an Nsight Systems export: version, GPUs, session start, process and thread names.

Privacy: only the tables named here are read for metadata. ``META_DATA_CAPTURE``,
``TARGET_INFO_SYSTEM_ENV`` and the host/user/path rows of the export metadata hold the
profiled command line and environment; they are read only on request (nsys_privacy).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from traceconv.errors import UnsupportedFormatError
from traceconv.readers.arrow_util import I64
from traceconv.readers.nsys.parts import LOW24, DictCol, NamesByKey, Strings, dictionary, ints
from traceconv.readers.nsys.sql import Database
from traceconv.readers.occupancy_columns import Devices

EXPORT_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")  # 2023.3+, 2022.2-2023.2
VERSION_KEYS = {"EXPORT_PRODUCT_VERSION": "nsys_version", "EXPORT_SCHEMA_VERSION": "nsys_export_schema_version"}
GPU_TABLES = ("TARGET_INFO_GPU", "TARGET_INFO_CUDA_GPU")  # 2021.2+, older
CUDA_DEVICES = "TARGET_INFO_CUDA_DEVICE"  # GPU id -> CUDA device id, per process (2023.4+)
SESSION = "TARGET_INFO_SESSION_START_TIME"
_MARKERS = (
    "CUPTI_ACTIVITY_KIND_",
    "NVTX_EVENTS",
    "TARGET_INFO_",
    "META_DATA_",
    "EXPORT_META_DATA",
    "ThreadNames",
    "PROCESSES",
    "OSRT_API",
)
# Tables that describe rather than record events: not listed as "not converted".
_DESCRIPTIVE = (
    "StringIds",
    "ENUM_",
    "META_DATA_",
    "EXPORT_META_DATA",
    "TARGET_INFO_",
    "PROCESSES",
    "ThreadNames",
    "ProcessStreams",
    "ANALYSIS_",
    "UnwindMethodType",
    "NVTX_PAYLOAD_",
    "GENERIC_EVENT_SOURCES",  # the types of generic events and GPU metrics
    "GENERIC_EVENT_TYPE",
    "sqlite_",
)


def check_export(db: Database) -> None:
    if db.has("StringIds") or any(t.startswith(_MARKERS) for t in db.tables):
        return
    raise UnsupportedFormatError(
        db.path,
        "is an SQLite database but not an Nsight Systems export (no StringIds, CUPTI or NVTX tables)",
        "give a report exported by `nsys export --type sqlite`, or the .nsys-rep itself",
    )


def export_version(db: Database) -> dict[str, str]:
    for table in EXPORT_TABLES:
        if {"name", "value"} <= set(db.columns(table)):
            rows = db.rows(table, f"SELECT name, value FROM [{table}] WHERE name IN (?, ?)", tuple(VERSION_KEYS))
            return {VERSION_KEYS[k]: str(v) for k, v in rows}
    return {}


def gpus(db: Database) -> list[dict[str, Any]]:
    for table in GPU_TABLES:
        if db.columns(table):
            return _all_rows(db, table)
    return []


def cuda_devices(db: Database) -> list[dict[str, Any]]:
    """TARGET_INFO_CUDA_DEVICE: per process, which GPU (``gpuId``, TARGET_INFO_GPU's ``id``) each CUDA
    device id (``cudaId``, the kernels' ``device``) is (2023.4+; [] before)."""
    return _all_rows(db, CUDA_DEVICES)


def devices(db: Database) -> Devices:
    """The GPUs' limits, for the occupancy of kernels: from TARGET_INFO_GPU, else (or where it
    lacks them, as in 2021.x exports) TARGET_INFO_CUDA_GPU."""
    rows = [row for table in GPU_TABLES for row in _all_rows(db, table)]
    pairs = _all_rows(db, CUDA_DEVICES) if {"gpuId", "cudaId"} <= set(db.columns(CUDA_DEVICES)) else []
    same_ids = bool(pairs) and all(p["gpuId"] == p["cudaId"] for p in pairs)
    return Devices.nsys(rows, same_ids)


def _all_rows(db: Database, table: str) -> list[dict[str, Any]]:
    names = list(db.columns(table))
    if not names:
        return []
    select = ", ".join(f"[{c}]" for c in names)
    return [dict(zip(names, row, strict=True)) for row in db.rows(table, f"SELECT {select} FROM [{table}]")]


def session_start_ns(db: Database) -> tuple[int | None, str | None]:
    cols = db.columns(SESSION)
    if "utcEpochNs" not in cols:
        return None, None
    utc = "utcTime" if "utcTime" in cols else "NULL"
    rows = db.rows(SESSION, f"SELECT utcEpochNs, {utc} FROM [{SESSION}] LIMIT 1")
    if not rows or not isinstance(rows[0][0], int):
        return None, None
    return rows[0][0], rows[0][1] if isinstance(rows[0][1], str) else None


def unconverted(db: Database, converted: set[str]) -> list[str]:
    """``TABLE (N rows)`` for each event table with rows that this reader does not convert."""
    out = []
    for table in sorted(db.tables):
        if table in converted or table.startswith(_DESCRIPTIVE) or table.endswith("_CALLCHAINS"):
            continue
        count = db.count(table)
        if count:
            out.append(f"{table} ({count:,} row{'' if count == 1 else 's'})")
    return out


class Names:
    """Process names by global pid (``PROCESSES``, else the main thread's name) and thread names by global tid."""

    def __init__(self, db: Database, strings: Strings) -> None:
        threads = db.read("ThreadNames", ["globalTid", "nameId"])
        self.tids = ints(threads, "globalTid")
        self.tnames: list[str | None] = strings.names(ints(threads, "nameId")).cast(pa.string()).to_pylist()
        procs = db.read("PROCESSES", ["globalPid", "name"])
        self.pids = ints(procs, "globalPid")
        self.pnames: list[str | None] = procs["name"].to_pylist() if "name" in procs.column_names else []
        if len(self.pids) == 0:  # before 2022.2: a process is named after its main thread (tid == pid)
            main = (self.tids >= 0) & ((self.tids & LOW24) == ((self.tids >> 24) & LOW24))
            self.pids = (self.tids[main] >> 24) << 24
            self.pnames = [self.tnames[i] for i in np.flatnonzero(main)]

        self._threads = NamesByKey(self.tids, self.tnames) if len(self.tids) else None
        self._processes = NamesByKey(self.pids, self.pnames) if len(self.pids) else None

    def threads(self, gtid: I64) -> DictCol:
        if self._threads is None:
            return dictionary(np.full(len(gtid), -1, dtype=np.int64), [], np.zeros(0, dtype=bool))
        return self._threads(np.where(gtid >= 0, gtid, -5))

    def processes(self, gpid: I64) -> DictCol:
        if self._processes is None:
            return dictionary(np.full(len(gpid), -1, dtype=np.int64), [], np.zeros(0, dtype=bool))
        return self._processes(np.where(gpid >= 0, gpid, -5))
