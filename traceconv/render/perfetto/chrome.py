"""Chrome's JSON trace format (``chrome://tracing``, Perfetto, Speedscope ...), for tools that read only that.

The same tracks and nesting as the protobuf trace: each group a process (``pid``), each track
and each lane a thread of it (``tid``), so that the slices of one ``tid`` nest and none is
dropped; complete events (``X``), instants (``i``), counters (``C``), and launch -> GPU work
flows (``s``/``f``, bound to the slices they start and end in). Times are microseconds with
three decimals, counted from the earliest event of the output (``otherData.traceconv_base_ns``
says when that is): an epoch time in microseconds has more digits than a JSON reader's double
keeps. Lines are made a column at a time with Arrow's string kernels.
"""

from __future__ import annotations

import json
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traceconv import __version__
from traceconv.render.perfetto.events import CounterEvents, SliceEvents
from traceconv.render.perfetto.nesting import BEGIN, END
from traceconv.render.perfetto.records import EVENT_ID_MASK, LAUNCHED
from traceconv.render.perfetto.tracks import SYNTHETIC_PID, Track

CHUNK = 1 << 15
LANE_SORT = 1000  # a lane sorts right after its track: thread_sort_index = track's tid * LANE_SORT + lane


def _text(values: np.ndarray[Any, Any]) -> pa.Array:
    return pa.array(values).cast(pa.string())


def _us(ns: np.ndarray[Any, Any]) -> pa.Array:
    """Nanoseconds as microseconds with three decimals, exactly."""
    return pc.binary_join_element_wise(_text(ns // 1000), pc.utf8_lpad(_text(ns % 1000), 3, "0"), ".")


def _line(*parts: pa.Array | str) -> pa.Array:
    return pc.binary_join_element_wise(*parts, "")


class ChromeSink:
    def __init__(self, out: BinaryIO, base_ns: int) -> None:
        self.out = out
        self.base = base_ns
        self._tracks: dict[int, Track] = {}
        self.pid: dict[int, int] = {}  # uuid -> pid
        self.tid: dict[int, int] = {}  # uuid -> tid (tracks that hold slices)
        self.counter_name: dict[int, str] = {}  # uuid -> the counter's JSON name
        self.meta: list[str] = []
        self.text: dict[int, list[str]] = {2: [json.dumps("")], 1: [json.dumps("")]}  # names, categories
        self._arrays: dict[int, pa.Array] = {}
        self._next_pid = SYNTHETIC_PID
        self._next_tid: dict[int, int] = {}
        self.out.write(b'{"traceEvents":[\n')

    # -- tracks and names ---------------------------------------------------------------------
    def tracks(self, tracks: list[Track], ts: int) -> None:
        for track in tracks:
            self._tracks[track.uuid] = track
            if track.parent == 0:
                self._group(track)
            elif track.unit is not None:
                self.pid[track.uuid] = self.pid[self._root(track)]
                self.counter_name[track.uuid] = json.dumps(track.title + (f" ({track.unit})" if track.unit else ""))
            else:
                self._thread(track)

    def _root(self, track: Track) -> int:
        while track.parent:
            track = self._tracks[track.parent]
        return track.uuid

    def _group(self, track: Track) -> None:
        pid = track.pid
        if pid is None:
            pid, self._next_pid = self._next_pid, self._next_pid + 1
        self.pid[track.uuid] = pid
        self.tid[track.uuid] = 0  # slices on the group itself (events of the process with no thread)
        self._meta("process_name", pid, None, {"name": track.name})
        self._meta("process_sort_index", pid, None, {"sort_index": len(self.pid)})
        self._meta("thread_name", pid, 0, {"name": track.name})

    def _thread(self, track: Track) -> None:
        pid = self.pid[self._root(track)]
        tid = self._next_tid[pid] = self._next_tid.get(pid, 0) + 1
        self.pid[track.uuid], self.tid[track.uuid] = pid, tid
        base = self.tid.get(track.parent, 0) if track.lane else tid
        order = base * LANE_SORT + track.lane
        self._meta("thread_name", pid, tid, {"name": track.title})
        self._meta("thread_sort_index", pid, tid, {"sort_index": order})

    def _meta(self, name: str, pid: int, tid: int | None, args: dict[str, Any]) -> None:
        event: dict[str, Any] = {"ph": "M", "name": name, "pid": pid}
        if tid is not None:
            event["tid"] = tid
        self.meta.append(json.dumps({**event, "args": args}, ensure_ascii=False))

    def names(self, names: list[tuple[int, str]], categories: list[tuple[int, str]]) -> None:
        for number, items in ((2, names), (1, categories)):
            self.text[number] += [json.dumps(text, ensure_ascii=False) for _, text in items]
            if items:
                self._arrays.pop(number, None)

    def _strings(self, number: int, iids: np.ndarray[Any, Any]) -> pa.Array:
        if number not in self._arrays:
            self._arrays[number] = pa.array(self.text[number], pa.string())
        return self._arrays[number].take(pa.array(iids))

    # -- events ---------------------------------------------------------------------------------
    def slices(self, events: SliceEvents) -> None:
        for lo in range(0, len(events), CHUNK):
            self._slice_chunk(events.part(lo, lo + CHUNK))

    def _where(self, uuids: np.ndarray[Any, Any]) -> tuple[pa.Array, pa.Array]:
        lut_pid = np.zeros(max(self.pid) + 1, np.int64)
        lut_tid = np.zeros(max(self.pid) + 1, np.int64)
        for uuid, pid in self.pid.items():
            lut_pid[uuid], lut_tid[uuid] = pid, self.tid.get(uuid, 0)
        return _text(lut_pid[uuids]), _text(lut_tid[uuids])

    def _slice_chunk(self, ev: SliceEvents) -> None:
        opens = ev.type != END
        if not opens.any():
            return
        rows = ev.rows[opens]
        kind, uuid, ts = ev.type[opens], ev.uuid[opens], ev.ts[opens] - self.base
        pid, tid = self._where(uuid)
        corr = pa.array(rows["corr"])
        extra = pc.if_else(pc.greater_equal(corr, 0), _line(',"correlation_id":', corr.cast(pa.string())), "")
        complete = pa.array(kind == BEGIN)
        head = pc.if_else(complete, '{"ph":"X","pid":', '{"ph":"i","s":"t","pid":')
        dur = pc.if_else(complete, _line(',"dur":', _us(rows["end"] - rows["start"])), "")
        lines = _line(
            head, pid, ',"tid":', tid, ',"ts":', _us(ts), dur,
            ',"name":', self._strings(2, rows["name"]), ',"cat":', self._strings(1, rows["cat"]),
            ',"args":{"event_id":', _text(rows["key"] & EVENT_ID_MASK), extra, "}},\n",
        )  # fmt: skip
        self._write(lines)
        self._flows(ev, opens, rows, pid, tid, ts)

    def _flows(self, ev: SliceEvents, opens: Any, rows: Any, pid: pa.Array, tid: pa.Array, ts: Any) -> None:
        counts = ev.flow_counts[opens]
        if counts.any():
            at = pa.array(np.repeat(np.arange(len(counts)), counts))
            self._write(self._flow("s", _text(ev.flow_ids), pid.take(at), tid.take(at), _us(ts).take(at)))
        launched = np.flatnonzero(rows["flags"] & LAUNCHED)
        if len(launched):
            at = pa.array(launched)
            self._write(self._flow("f", _text(rows["key"][launched]), pid.take(at), tid.take(at), _us(ts[launched])))

    @staticmethod
    def _flow(phase: str, ids: pa.Array, pid: pa.Array, tid: pa.Array, ts: pa.Array) -> pa.Array:
        head = '{"ph":"s","id":' if phase == "s" else '{"ph":"f","bp":"e","id":'
        return _line(head, ids, ',"pid":', pid, ',"tid":', tid, ',"ts":', ts, ',"name":"launch","cat":"launch"},\n')

    def counters(self, events: CounterEvents) -> None:
        for lo in range(0, len(events), CHUNK):
            ts, uuid, value = (a[lo : lo + CHUNK] for a in (events.ts, events.uuid, events.value))
            pid, _ = self._where(uuid)
            names = self._counter_names().take(pa.array(uuid))
            values = pa.array(value).cast(pa.string())
            line = _line('{"ph":"C","pid":', pid, ',"ts":', _us(ts - self.base), ',"name":', names)
            self._write(_line(line, ',"args":{"value":', values, "}},\n"))

    def _counter_names(self) -> pa.Array:
        """Each counter track's JSON name, by uuid."""
        names = [""] * (max(self.counter_name, default=0) + 1)
        for uuid, name in self.counter_name.items():
            names[uuid] = name
        return pa.array(names, pa.string())

    def _write(self, lines: pa.Array) -> None:
        """The lines' bytes as they lie in the array (no Python string per event)."""
        if not len(lines):
            return
        lines = lines.cast(pa.large_string())
        offsets = np.frombuffer(lines.buffers()[1], np.int64, len(lines) + 1, lines.offset * 8)
        data = memoryview(lines.buffers()[2])
        self.out.write(data[offsets[0] : offsets[-1]])

    def close(self) -> None:
        other = {"traceconv": __version__, "traceconv_base_ns": self.base}
        tail = ",\n".join(self.meta)
        self.out.write(f'{tail}\n],"otherData":{json.dumps(other)}}}\n'.encode())
