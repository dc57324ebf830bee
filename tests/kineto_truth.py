"""Independent reading of Kineto JSON for tests: stdlib json with exact decimals, no traceconv code."""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

# The documented category -> kind mapping (docs/schema.md, "Kinds"), restated here on purpose.
KIND_OF_CATEGORY = {
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


def load(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = json.loads(raw, parse_float=Decimal)
    return doc if isinstance(doc, dict) else {"traceEvents": doc}


def expected_kind(event: dict[str, Any]) -> str:
    ph = event.get("ph")
    if ph in ("s", "f", "t", "M", "C", "b", "e", "n"):
        return "other"
    if event.get("name") == "[memory]":
        return "memory"
    kind = KIND_OF_CATEGORY.get(str(event.get("cat") or "").lower())
    if kind:
        return kind
    return "marker" if ph in ("i", "I", "R") else "other"


def to_ns(us: Any) -> int | None:
    if us is None:
        return None
    return int((Decimal(us) * 1000).to_integral_value())
