"""One input's unified rows -> records on tracks: where each row goes on the timeline.

- GPU work and the GPU-side rows of a trace (device and stream known): the stream's track in
  the GPU's group;
- host rows: the thread's track in the process's group (the process's own track when the
  row names no thread);
- allocator rows (kind ``memory``): counters of the memory allocated and reserved, per GPU
  (host memory in the process's group); where a trace gives only each allocation's size, the
  running sum of them;
- GPU metric samples (kind ``metric``, a ``value`` and ``unit``): a counter per metric and GPU.

Ranges (phase ``X``) become slices and instants (``i``, or a range that never ended) instant
events; flows, metadata and Chrome counters (``s``, ``f``, ``M``, ``C``) are the trace's own
bookkeeping, which the tracks and the launch links replace.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from traceconv.render.perfetto.records import (
    COUNTER,
    INSTANT,
    KEY_BITS,
    LAUNCHED,
    Strings,
    codes,
    ints,
    lookup,
    records,
)
from traceconv.render.perfetto.records import resolve as resolve_keys
from traceconv.render.perfetto.records import texts as dictionary
from traceconv.render.perfetto.tracks import Tracks

COUNTER_KINDS = ("memory", "metric")
MEMORY_TITLES = ("memory allocated", "memory reserved", "memory allocated (running sum)")
GPU_ROW, THREAD_ROW, PROCESS_ROW, DEVICE_ROW, UNPLACED_ROW = 1, 2, 3, 4, 5
TEXT_ID = 1 << 60  # a pid or tid written as text: TEXT_ID + its interned id


@dataclass
class Scanner:
    """Turns the batches of one input into records; the tracks and names it meets are kept in ``tracks``
    and ``names`` (shared by every input of the output)."""

    tracks: Tracks
    names: Strings
    categories: Strings
    seq_of: dict[str | None, int]  # trace_id -> trace number (from 1)
    offsets: dict[int, int]  # trace number -> ns added to its times
    launches: list[np.ndarray[Any, Any]] = field(default_factory=list)  # (launch key, flow id) pairs
    skipped: Counter[str] = field(default_factory=Counter)
    _labels: Strings = field(default_factory=Strings)  # pids and tids written as text

    def batch(self, batch: pa.RecordBatch) -> np.ndarray[Any, np.dtype[np.void]]:
        seq = self._seq(batch)
        kinds, kind = dictionary(batch, "kind"), codes(batch, "kind")
        phases, phase = dictionary(batch, "phase"), codes(batch, "phase")
        has_start = ints(batch, "start_ns")[1]
        counter = lookup(kinds, kind, lambda k: k in COUNTER_KINDS, False) & has_start
        event = lookup(phases, phase, lambda p: p in ("X", "i"), False) & ~counter & has_start
        self.skipped["no start time"] += int(np.count_nonzero(~has_start))
        self.skipped["flows, metadata, counters"] += int(np.count_nonzero(has_start & ~counter & ~event))
        cat = lookup(kinds, kind, self.categories.iid, 0)
        instant = lookup(phases, phase, lambda p: p == "i", False)
        metric = lookup(kinds, kind, lambda k: k == "metric", False)
        parts = [self._events(batch.filter(pa.array(event)), seq[event], cat[event], instant[event])]
        parts += self._counters(batch.filter(pa.array(counter)), seq[counter], metric[counter])
        return np.concatenate(parts)

    def _seq(self, batch: pa.RecordBatch) -> np.ndarray[Any, np.dtype[np.int64]]:
        default = self.seq_of.get(None, min(self.seq_of.values()))
        seq: np.ndarray[Any, np.dtype[np.int64]] = lookup(
            dictionary(batch, "trace_id"), codes(batch, "trace_id"), self.seq_of.get, default
        ).astype(np.int64)
        return seq

    def _offset(self, seq: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        lut = np.zeros(max(self.offsets, default=0) + 2, np.int64)
        for s, offset in self.offsets.items():
            lut[s] = offset
        shift: np.ndarray[Any, Any] = lut[seq]
        return shift

    # -- slices and instants ----------------------------------------------------------------
    def _events(self, batch: pa.RecordBatch, seq: Any, cat: Any, instant: Any) -> np.ndarray[Any, Any]:
        out = records(batch.num_rows)
        if batch.num_rows == 0:
            return out
        out["track"] = self._place(batch, seq)
        out["name"] = self.names.codes(batch.column("name"))
        out["cat"] = cat
        shift = self._offset(seq)
        start = ints(batch, "start_ns")[0] + shift
        end, has_end = ints(batch, "end_ns")
        instant = instant | ~has_end
        out["start"] = start
        out["end"] = np.where(instant, start, np.maximum(end + shift, start))
        event_id = ints(batch, "event_id")[0]
        out["key"] = seq << KEY_BITS | event_id
        corr, has_corr = ints(batch, "correlation_id")
        out["corr"] = np.where(has_corr, corr, -1)
        launch, launched = ints(batch, "launch_event_id")
        out["flags"] = np.where(instant, INSTANT, 0) | np.where(launched, LAUNCHED, 0)
        if launched.any():
            pairs = np.stack([(seq << KEY_BITS | launch)[launched], out["key"][launched]], axis=1)
            self.launches.append(pairs)
        return out

    def _place(self, batch: pa.RecordBatch, seq: Any) -> np.ndarray[Any, Any]:
        pid, has_pid = self._id(batch, "pid", "pid_label")
        tid, has_tid = self._id(batch, "tid", "tid_label")
        device, has_device = ints(batch, "device")
        stream, has_stream = ints(batch, "stream")
        gpu = has_device & has_stream
        where = [gpu, ~gpu & has_pid & has_tid, ~gpu & has_pid & ~has_tid, ~gpu & ~has_pid & has_device]
        place = np.select(where, [GPU_ROW, THREAD_ROW, PROCESS_ROW, DEVICE_ROW], UNPLACED_ROW)
        a = np.select(where, [device, pid, pid, device], 0)
        b = np.select(where[:2], [pid, tid], 0)
        c = np.where(gpu, stream, 0)
        names = _Names(batch)

        def make(key: tuple[int, ...], row: int) -> int:
            return self._track(key, names, row)

        return resolve_keys(np.stack([seq, place, a, b, c], axis=1), make)

    def _id(self, batch: pa.RecordBatch, name: str, label: str) -> tuple[Any, Any]:
        """A pid or tid column, with the ids a trace wrote as text (``TEXT_ID`` + their interned id)."""
        value, valid = ints(batch, name)
        if label in batch.schema.names:
            text = self._labels.codes(batch.column(label))
            value = np.where(valid, value, TEXT_ID + text)
            valid = valid | (text > 0)
        return value, valid

    def _pid(self, value: int) -> int | str:
        return value if value < TEXT_ID else self._labels.texts[value - TEXT_ID]

    def _track(self, key: tuple[int, ...], names: _Names, row: int) -> int:
        seq, place, a, b, c = key
        t = self.tracks
        if place == GPU_ROW:
            parent = t.gpu(seq, a)
            return t.child(("stream", seq, a, b, c), parent, f"stream {c}", detail=f"pid {self._pid(b)}")
        if place == DEVICE_ROW:
            return t.index_of(t.gpu(seq, a))
        if place == UNPLACED_ROW:
            return t.index_of(t.unplaced(seq))
        group = t.process(seq, self._pid(a), names.process(row))
        t.rename(t.index_of(group), names.process(row))
        if place == PROCESS_ROW:
            return t.index_of(group)
        thread, tid = names.thread(row), self._pid(b)
        title = thread if thread and str(tid) in thread else f"{thread} {tid}" if thread else None
        index = t.child(("thread", seq, a, b), group, title or f"thread {tid or '(no id)'}", named=title is not None)
        t.rename(index, title)
        return index

    # -- counters -----------------------------------------------------------------------------
    def _counters(self, batch: pa.RecordBatch, seq: Any, metric: Any) -> list[np.ndarray[Any, Any]]:
        if batch.num_rows == 0:
            return []
        start = ints(batch, "start_ns")[0] + self._offset(seq)
        event_id = ints(batch, "event_id")[0]
        device, has_device = ints(batch, "device")
        pid, has_pid = self._id(batch, "pid", "pid_label")
        on_gpu = has_device & (device >= 0)
        parent = np.select([on_gpu, has_pid], [device, pid], 0)
        where = np.select([on_gpu, has_pid], [GPU_ROW, PROCESS_ROW], UNPLACED_ROW)
        memory = ~metric
        allocated, has_allocated = ints(batch, "total_allocated_bytes")
        reserved, has_reserved = ints(batch, "total_reserved_bytes")
        size, has_size = ints(batch, "bytes")
        series = [
            (memory & has_allocated, allocated, 0, 0, 0),
            (memory & has_reserved, reserved, 1, 0, 0),
            (memory & ~has_allocated & ~has_reserved & has_size, size, 2, 0, 0),
        ]
        series += self._metric_series(batch, metric)
        out = []
        for rows, values, sub, name, unit in series:
            if not np.any(rows):
                continue
            recs = records(int(np.count_nonzero(rows)))
            keys = np.stack([seq[rows], where[rows], parent[rows], np.full(len(recs), sub)], axis=1)
            if isinstance(name, np.ndarray):
                keys = np.concatenate([keys, np.stack([name[rows], unit[rows]], axis=1)], axis=1)
            recs["track"] = resolve_keys(keys, lambda key, _row: self._counter_track(key))
            recs["start"] = recs["end"] = start[rows]
            recs["key"] = seq[rows] << KEY_BITS | event_id[rows]
            recs["value"] = values[rows]
            recs["flags"] = COUNTER
            out.append(recs)
        return out

    def _metric_series(self, batch: pa.RecordBatch, metric: Any) -> list[tuple[Any, Any, int, Any, Any]]:
        if not metric.any() or "value" not in batch.schema.names:
            return []
        value = batch.column("value").fill_null(np.nan).to_numpy(zero_copy_only=False)
        name = self.names.codes(batch.column("name"))
        unit = self._labels.codes(batch.column("unit")) if "unit" in batch.schema.names else np.zeros(len(value))
        return [(metric & ~np.isnan(value), value, 3, name, unit.astype(np.int64))]

    def _counter_track(self, key: tuple[int, ...]) -> int:
        seq, where, parent_id, sub = key[:4]
        t = self.tracks
        if where == GPU_ROW:
            parent = t.gpu(seq, parent_id)
        elif where == PROCESS_ROW:
            parent = t.process(seq, self._pid(parent_id), None)
        else:
            parent = t.unplaced(seq)
        if sub == 3:
            name, unit = key[4], key[5]
            return t.child(("metric", *key), parent, self.names.texts[name], unit=self._labels.texts[unit])
        title = MEMORY_TITLES[sub] if where == GPU_ROW else "host " + MEMORY_TITLES[sub]
        return t.child(("memory", *key), parent, title, unit="bytes", running_sum=sub == 2)


class _Names:
    """The process and thread names of a batch's rows, read only for the rows asked."""

    def __init__(self, batch: pa.RecordBatch) -> None:
        self._process = (dictionary(batch, "process_name"), codes(batch, "process_name"))
        self._thread = (dictionary(batch, "thread_name"), codes(batch, "thread_name"))

    @staticmethod
    def _at(column: tuple[list[str | None] | None, Any], row: int) -> str | None:
        values, index = column
        return values[index[row]] if values is not None and index[row] >= 0 else None

    def process(self, row: int) -> str | None:
        return self._at(self._process, row)

    def thread(self, row: int) -> str | None:
        return self._at(self._thread, row)
