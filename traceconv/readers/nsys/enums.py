"""Enum codes of Nsight Systems exports as the labels of the unified schema.

Exports from 2022.4 on carry ``ENUM_*`` tables; older ones do not, and their codes are fixed
(FORMATS.md), so they are embedded here. When a table is present it wins: its constant
names are turned into the same short labels that PyTorch traces use (``HtoD``, ``Pageable``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import cast

import numpy as np

from traceconv.readers.arrow_util import I64, from_codes, to_numpy
from traceconv.readers.nsys.parts import ChunkedCol, Col, DictCol, distinct
from traceconv.readers.nsys.sql import Database

COPY_KINDS = {
    0: "Unknown",
    1: "HtoD",
    2: "DtoH",
    3: "HtoA",
    4: "AtoH",
    5: "AtoA",
    6: "AtoD",
    7: "DtoA",
    8: "DtoD",
    9: "HtoH",
    10: "PtoP",
    11: "UVM HtoD",
    12: "UVM DtoH",
    13: "UVM DtoD",
}
MEMORY_KINDS = {
    0: "Pageable",
    1: "Pinned",
    2: "Device",
    3: "Array",
    4: "Managed",
    5: "DeviceStatic",
    6: "ManagedStatic",
    7: "Unknown",
}
SYNC_TYPES = {0: "unknown", 1: "event", 2: "stream_wait_event", 3: "stream", 4: "context"}
# Kineto's names for CUPTI synchronisation records, so that both sources name them alike.
SYNC_NAMES = {
    "unknown": "Unknown Sync",
    "event": "Event Sync",
    "stream_wait_event": "Stream Wait Event",
    "stream": "Stream Sync",
    "context": "Context Sync",
}

# Nsight Systems' own diagnostic messages (2024.6+): the labels of its ENUM_DIAGNOSTIC_* tables.
SEVERITIES = {0: "Unknown", 1: "Info", 2: "Warning", 3: "Error", 4: "Verbose"}
DIAGNOSTIC_SOURCES = {0: "Unknown source", 1: "Injection", 2: "Daemon", 3: "Analysis"}
TIMESTAMP_SOURCES = {0: "Unknown timestamp", 1: "Target timestamp", 2: "Host timestamp"}
MEMORY_OPERATIONS = {0: "Allocation", 1: "Deallocation"}  # ENUM_CUDA_DEV_MEM_EVENT_OPER

_DIRECTION = re.compile(r"^(UVM_)?([A-Z])TO([A-Z])$")


def _copy_label(name: str) -> str | None:
    """``CUDA_MEMCPY_KIND_UVM_HTOD`` -> ``UVM HtoD``."""
    suffix = name.removeprefix("CUDA_MEMCPY_KIND_")
    if suffix == "UNKNOWN":
        return "Unknown"
    m = _DIRECTION.match(suffix)
    return f"{'UVM ' if m.group(1) else ''}{m.group(2)}to{m.group(3)}" if m else None


def _memory_label(name: str) -> str | None:
    """``CUDA_MEMOPR_MEMORY_KIND_DEVICE_STATIC`` -> ``DeviceStatic``."""
    suffix = name.removeprefix("CUDA_MEMOPR_MEMORY_KIND_")
    return "".join(part.capitalize() for part in suffix.split("_")) if suffix and suffix != name else None


def _sync_label(name: str) -> str | None:
    """``CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT`` -> ``stream_wait_event``."""
    suffix = name.removeprefix("CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_")
    return suffix.removesuffix("_SYNCHRONIZE").lower() if suffix != name else None


def _as_labelled(name: str) -> str | None:
    """No rule: the table's own label (``Warning``, ``Host timestamp``) is the label."""
    return None


class Enums:
    """Code -> label maps for one export."""

    def __init__(self, db: Database) -> None:
        self.copy = _load(db, "ENUM_CUDA_MEMCPY_OPER", COPY_KINDS, _copy_label)
        self.memory = _load(db, "ENUM_CUDA_MEM_KIND", MEMORY_KINDS, _memory_label)
        self.sync = _load(db, "ENUM_CUPTI_SYNC_TYPE", SYNC_TYPES, _sync_label)
        self.severity = _load(db, "ENUM_DIAGNOSTIC_SEVERITY_LEVEL", SEVERITIES, _as_labelled)
        self.diagnostic_source = _load(db, "ENUM_DIAGNOSTIC_SOURCE_TYPE", DIAGNOSTIC_SOURCES, _as_labelled)
        self.timestamp_source = _load(db, "ENUM_DIAGNOSTIC_TIMESTAMP_SOURCE", TIMESTAMP_SOURCES, _as_labelled)
        self.memory_operation = _load(db, "ENUM_CUDA_DEV_MEM_EVENT_OPER", MEMORY_OPERATIONS, _as_labelled)


def _load(db: Database, table: str, embedded: dict[int, str], rule: Callable[[str], str | None]) -> dict[int, str]:
    labels = dict(embedded)
    cols = db.columns(table)
    if "id" not in cols or "name" not in cols:
        return labels
    label_col = "label" if "label" in cols else "name"
    for code, name, label in db.rows(table, f"SELECT id, name, {label_col} FROM [{table}]"):
        if isinstance(code, int) and isinstance(name, str):
            labels[code] = rule(name) or (label if isinstance(label, str) else name)
    return labels


def labelled(codes: Col | ChunkedCol, labels: dict[int, str]) -> DictCol:
    """Dictionary array of labels for integer ``codes``; a code no table knows becomes ``code N``."""
    values = to_numpy(codes, fill=-(2**62))
    known = sorted(labels)
    names = [labels[k] for k in known]
    for code in distinct(values[values != -(2**62)]).tolist():
        if code not in labels:
            known.append(code)
            names.append(f"code {code}")
    keys = np.asarray(known, dtype=np.int64)
    order = np.argsort(keys)
    pos = np.searchsorted(keys[order], values)
    pos = np.minimum(pos, max(len(keys) - 1, 0))
    hit = (keys[order][pos] == values) if len(keys) else np.zeros(len(values), dtype=bool)
    idx: I64 = np.where(hit, order[pos], -1).astype(np.int64)
    return cast(DictCol, from_codes(idx, names))
