"""The columns of the per-name tables of operators, NVTX ranges and kernels, and operators' input shapes.

Operator times follow ``torch.profiler``'s ``key_averages()``: summed over every call,
so an operator nested in itself counts its inner calls again.

- ``gpu_self_ns``: GPU rows (kernels, copies, memsets) attributed to the operator itself
  (the innermost operator around the launching call);
- ``gpu_total_ns``: GPU rows launched anywhere inside it on its thread (children included);
- ``cpu_total_ns``: its duration; ``cpu_self_ns``: minus its direct children (operators,
  annotations and CUDA API calls), never below 0.

As in ``key_averages()``, an operator whose only child has its own name counts once.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import orjson
import pyarrow as pa

from traceconv.analyses.source import Source
from traceconv.analyses.summary.attribution.tree import Trees

OP_COLUMNS = ("name", "calls", "gpu_self_ns", "gpu_total_ns", "cpu_total_ns", "cpu_self_ns")
NVTX_COLUMNS = ("name", "count", "dur_ns", "gpu_ns", "gpu_process_ns")
KERNEL_COLUMNS = ("name", "count", "dur_ns", "avg_ns", "queue_ns", "queue_avg_ns", "time_pct", "occupancy_pct")
_SHAPE_SAMPLE = 200  # calls whose args are read for the input shapes of one operator


def input_dims(source: Source, trees: Trees, names: list[str]) -> dict[str, dict[str, Any]]:
    """For each operator name: its most frequent ``Input Dims`` (PyTorch ``record_shapes``) and how many differ.

    Reads the args of a sample of calls per name (the first ones); names with no recorded shapes are left out.
    """
    if "args" not in source.columns:
        return {}
    at = {label: i for i, label in enumerate(trees.labels)}
    keys = [(name, trace, eid) for name in names if name in at for trace, eid in trees.samples.get(at[name], [])]
    if not keys:
        return {}
    source.register(
        "sampled",
        pa.table({"label": [k[0] for k in keys], "trace_id": [k[1] for k in keys], "event_id": [k[2] for k in keys]}),
    )
    rows = source.arrow(
        "SELECT s.label, e.args FROM sampled s JOIN events e ON coalesce(e.trace_id, '') = s.trace_id "
        "AND e.event_id = s.event_id WHERE e.args LIKE '%Input Dims%' ORDER BY s.trace_id, s.event_id"
    ).to_pylist()
    shapes: dict[str, Counter[str]] = {}
    for row in rows:
        dims = _dims(row["args"])
        if dims is not None:
            shapes.setdefault(row["label"], Counter())[dims] += 1
    return {n: {"input_dims": c.most_common(1)[0][0], "shapes": len(c)} for n, c in shapes.items()}


def _dims(text: str | None) -> str | None:
    if not text or "Input Dims" not in text:
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    dims = value.get("Input Dims") if isinstance(value, dict) else None
    return orjson.dumps(dims).decode() if isinstance(dims, list) else None
