"""A chunk's API call and operator rows under the link index's text codes, and the operator rows
kept between the passes (:class:`OpRows`) for :meth:`~traceconv.readers.pytorch.links.LinkIndex.finalize`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from traceconv.readers.arrow_util import I64, int_columns
from traceconv.readers.pytorch.link_rows import FIELDS, RAW_OPS
from traceconv.readers.pytorch.operators import narrow
from traceconv.readers.pytorch.spill import SegmentFile, Spill


def labelled_id(code: I64) -> I64:
    """The id that stands for a pid or tid written as text (``Spans``, ``stream 7``), by the label's
    name code: ``-2 - code``, below every real id and the -1 of "none", distinct per label."""
    return -2 - code


OP_COLUMNS = (*dict(FIELDS), "name", "is_cpu")  # what LinkIndex.finalize takes of each chunk's operators
Codes = tuple[I64, "I64 | None", "I64 | None"]  # a chunk's name codes, pid label codes, tid label codes


def coded(rows: dict[str, Any], codes: Codes, event_offset: int) -> dict[str, I64]:
    """A chunk's API call or operator rows (:func:`~traceconv.readers.pytorch.link_rows.prepare`'s)
    with the index's codes for their texts (:meth:`LinkIndex.text_codes`) and event ids shifted by
    ``event_offset``: the fields of :data:`FIELDS` and ``name``."""
    names, pid_labels, tid_labels = codes
    out = {field: rows[field] for field, _ in FIELDS}
    out["event_id"] = narrow(rows["event_id"] + event_offset)
    for field, lut in (("pid", pid_labels), ("tid", tid_labels)):  # labelled ids ("Spans", "stream 7")
        if lut is not None:
            label = rows[field + "_label_codes"]
            out[field] = narrow(np.where(label >= 0, labelled_id(lut[np.maximum(label, 0)]), out[field]))
    name = rows["name_codes"]
    out["name"] = narrow(np.where(name >= 0, names[np.maximum(name, 0)] if len(names) else -1, -1))
    return out


def op_table(rows: dict[str, I64], is_cpu: Any) -> pa.Table:
    """A chunk's operator rows as the spill keeps them (:meth:`LinkIndex.add_parts`)."""
    cols: dict[str, Any] = {f: pa.array(rows[f]) for f in OP_COLUMNS[:-1]}
    cols["is_cpu"] = is_cpu
    return pa.table(cols)


class OpRows:
    """Pass 1's operator rows for :meth:`LinkIndex.finalize`, in chunk order: tables made at once
    (:meth:`LinkIndex.add_parts`), or rows a worker wrote to its segment file with its chunk's own
    text codes (:func:`~traceconv.readers.pytorch.link_rows.raw_ops`), given the index's codes as
    they are read back. Those the main process (the limit of pass 1 on many cores) neither
    receives through a pipe nor writes. Either way each chunk comes back as the same numpy columns."""

    def __init__(self) -> None:
        self._spill = Spill()
        self._how: list[tuple[Codes, int] | None] = []

    def append(self, table: pa.Table) -> None:
        self._spill.append(table)
        self._how.append(None)

    def add_segment(self, file: SegmentFile, at: tuple[int, int, int], codes: Codes, event_offset: int) -> None:
        """Rows a worker wrote to ``file`` (``at``: position, length, rows), coded with ``codes``."""
        pos, length, count = at
        self._spill.add_segment(file, pos, length, 0, None, count)
        self._how.append((codes, event_offset))

    def __iter__(self) -> Iterator[dict[str, I64]]:
        """Each chunk's operators as numpy columns (:data:`OP_COLUMNS`)."""
        how, self._how = self._how, []
        for table, made in zip(self._spill, how, strict=True):
            if made is None:
                yield int_columns(table, OP_COLUMNS)
            else:
                rows = int_columns(table, RAW_OPS)
                yield coded(rows, *made) | {"is_cpu": rows["is_cpu"]}

    def close(self) -> None:
        self._spill.close()
        self._how = []
