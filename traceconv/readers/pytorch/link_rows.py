"""What pass 1 keeps of each chunk for the link index (pure: runs in the worker processes, so that
the main process, the limit on many cores, does only the global part): the rows of API calls, GPU
rows, operators and metadata (:func:`extract`), as numpy arrays and distinct texts (:func:`prepare`),
which :meth:`~traceconv.readers.pytorch.links.LinkIndex.add_parts` takes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from traceconv import schema as S
from traceconv.readers.arrow_util import dict_codes, text_is, to_numpy
from traceconv.readers.pytorch.columns import IS_GPU, KIND_CODE
from traceconv.readers.pytorch.operators import narrow

# The link index's fields of an API call or operator row, and the unified columns they come from.
FIELDS = (
    ("event_id", "event_id"),
    ("corr", "correlation_id"),
    ("ext", "external_id"),
    ("pid", "pid"),
    ("tid", "tid"),
    ("start", "start_ns"),
    ("end", "end_ns"),
)


# A GPU row's: its start orders the rows of a CUDA graph replay (graph_capture).
_GPU_COLS = (("event_id", "event_id"), ("corr", "correlation_id"), ("ext", "external_id"), ("start", "start_ns"))
_ROW_COLUMNS = [col for _, col in FIELDS] + ["name", "pid_label", "tid_label"]


def extract(table: pa.Table) -> dict[str, pa.Table]:
    """The rows of one pass-1 chunk that the link index needs (pure: runs in worker processes).

    ``api``: CUDA API calls; ``gpu``: kernels, copies, sets; ``ops``: CPU operators and user
    annotations (with ``is_cpu``); ``meta``: metadata events naming processes and threads.
    ``table`` may leave out columns that are null in every row (:func:`schema.present`).
    """
    parts: dict[str, pa.Table] = {}
    kind = to_numpy(table["kind"].combine_chunks().indices)
    is_api = kind == KIND_CODE["cuda_api"]
    if is_api.any():
        parts["api"] = _rows(table, _ROW_COLUMNS, is_api)
    gpu = IS_GPU[kind]
    if gpu.any():
        parts["gpu"] = _rows(table, [col for _, col in _GPU_COLS], gpu)
    meta = _equal(table, "phase", "M")
    if meta.any():
        parts["meta"] = _rows(table, ["name", "pid", "tid", "pid_label", "tid_label", "args"], meta)
    is_cpu = kind == KIND_CODE["cpu_op"]
    is_op = is_cpu | _equal(table, "category", "user_annotation", fold=True)
    if is_op.any():
        ops = _rows(table, _ROW_COLUMNS, is_op)
        parts["ops"] = ops.append_column("is_cpu", pa.array(is_cpu[is_op].astype(np.int64)))
    return parts


Prepared = dict[str, Any]  # extract's rows as numpy arrays and distinct texts (see prepare)


def prepare(parts: dict[str, pa.Table]) -> Prepared:
    """:func:`extract`'s rows in the form :meth:`LinkIndex.add_parts` takes (pure: runs in worker
    processes, so that the main process, the limit on many cores, does only the global part):
    each column as a numpy array, names and labels as their distinct texts and codes."""
    out: Prepared = {}
    for key in ("api", "ops"):
        if key in parts:
            out[key] = _prepared_rows(parts[key])
    if "gpu" in parts:
        sub = parts["gpu"]
        out["gpu"] = {field: to_numpy(sub[col]) for field, col in _GPU_COLS}
        out["gpu"]["corr"], out["gpu"]["ext"] = narrow(out["gpu"]["corr"]), narrow(out["gpu"]["ext"])
    if "meta" in parts:
        out["meta"] = parts["meta"].to_pylist()
    return out


def _prepared_rows(sub: pa.Table) -> dict[str, Any]:
    rows: dict[str, Any] = {field: to_numpy(sub[col]) for field, col in FIELDS}
    rows["names"], rows["name_codes"] = dict_codes(sub["name"].combine_chunks())
    for field in ("pid", "tid"):
        rows[field + "_labels"], rows[field + "_label_codes"] = dict_codes(sub[field + "_label"].combine_chunks())
    for field in ("pid", "tid", "corr", "ext"):  # event ids are narrowed once shifted (add_parts)
        rows[field] = narrow(rows[field])
    if "is_cpu" in sub.column_names:
        rows["is_cpu"] = sub["is_cpu"]
    return rows


# A chunk's operator rows as a worker writes them to its segment file: prepare's arrays, with the
# codes of the chunk's own texts (the texts go to the main process, which gives them the index's codes).
RAW_OPS = (*(f for f, _ in FIELDS), "name_codes", "pid_label_codes", "tid_label_codes", "is_cpu")
TEXTS = ("names", "pid_labels", "tid_labels")


def raw_ops(rows: dict[str, Any]) -> tuple[pa.Table, dict[str, Any]]:
    """:func:`prepare`'s operator rows as a table of :data:`RAW_OPS`, and their distinct texts."""
    return pa.table({f: rows[f] for f in RAW_OPS}), {t: rows[t] for t in TEXTS}


def _rows(table: pa.Table, names: list[str], mask: Any) -> pa.Table:
    """``names`` of the rows where ``mask`` holds; a column ``table`` leaves out is nulls."""
    have = set(table.column_names)
    sub = table.select([n for n in names if n in have]).filter(pa.array(mask))
    cols = {n: sub[n] if n in have else pa.nulls(sub.num_rows, S.BY_NAME[n].type) for n in names}
    return pa.table(cols)


def _equal(table: pa.Table, name: str, value: str, fold: bool = False) -> Any:
    """:func:`text_is` of column ``name``; no row where ``table`` leaves the column out."""
    if name not in table.column_names:
        return np.zeros(table.num_rows, dtype=np.bool_)
    return text_is(table[name], value, fold)
