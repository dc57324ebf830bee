"""The Perfetto protobuf trace (``.pftrace``): track descriptors, interned names, track events.

Field numbers are those of Perfetto's public protos (``protos/perfetto/trace/trace_packet.proto``,
``track_event/track_event.proto``, ``track_descriptor.proto``, ``counter_descriptor.proto``,
``interned_data/interned_data.proto``). Every event is on one packet sequence whose first
packet clears its interning state; names, categories and argument names are interned there
(``name_iid``), so that a kernel's name is written once however often it runs. Timestamps
are absolute nanoseconds (``TracePacket.timestamp``).
"""

from __future__ import annotations

from typing import BinaryIO

import numpy as np

from traceconv.render.perfetto import encoder as E
from traceconv.render.perfetto.events import CounterEvents, SliceEvents
from traceconv.render.perfetto.nesting import END
from traceconv.render.perfetto.records import EVENT_ID_MASK, LAUNCHED
from traceconv.render.perfetto.tracks import Track

SEQUENCE = 1
SEQ_INCREMENTAL_STATE_CLEARED, SEQ_NEEDS_INCREMENTAL_STATE = 1, 2
COUNTER = 4  # TrackEvent.TYPE_COUNTER
UNIT_SIZE_BYTES = 3  # CounterDescriptor.Unit
CHILD_ORDERING_EXPLICIT = 3
SIBLING_MERGE_BEHAVIOR_NONE = 2
ARGUMENTS = ((1, "event_id"), (2, "correlation_id"))  # debug annotation names: (iid, name)
EVENT_ID_ARG, CORRELATION_ARG = 1, 2
CHUNK = 1 << 15  # events encoded at once: the encoder's buffers stay a few MB
NAMES_PER_PACKET = 2000


# TracePacket
TIMESTAMP, SEQUENCE_ID, TRACK_EVENT, INTERNED_DATA, SEQUENCE_FLAGS, TRACK_DESCRIPTOR = 8, 10, 11, 12, 13, 60
# TrackEvent
CATEGORY_IIDS, DEBUG_ANNOTATIONS, TYPE, NAME_IID, TRACK_UUID = 3, 4, 9, 10, 11
DOUBLE_COUNTER_VALUE, FLOW_IDS, TERMINATING_FLOW_IDS = 44, 47, 48


def packet(*fields: tuple[int, object]) -> bytes:
    """One packet, framed as a field of the ``Trace`` message."""
    return E.field(1, E.message(*fields))


def descriptor(track: Track) -> bytes:
    """A TrackDescriptor: a process group, a named child track, or a counter track."""
    fields: list[tuple[int, object]] = [(1, track.uuid)]
    if track.parent:
        fields.append((5, track.parent))
    if track.pid is not None:
        fields.append((3, E.message((1, track.pid), (6, track.name))))
    else:
        fields.append((2, track.name))
    if track.unit is not None:
        unit = (3, UNIT_SIZE_BYTES) if track.unit == "bytes" else (6, track.unit or None)
        fields.append((8, E.message(unit)))
    fields += [(11, CHILD_ORDERING_EXPLICIT), (12, track.rank), (15, SIBLING_MERGE_BEHAVIOR_NONE)]
    return E.message(*fields)


class ProtoSink:
    """Writes the events to ``out`` as Perfetto TracePackets, chunk by chunk."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.started = False
        self.bytes = 0

    def _write(self, data: bytes | np.ndarray) -> None:
        self.out.write(data if isinstance(data, bytes) else data.tobytes())
        self.bytes += len(data)

    def tracks(self, tracks: list[Track], ts: int) -> None:
        for track in tracks:
            stamp = (TIMESTAMP, ts) if track.pid is not None else (TIMESTAMP, None)
            self._write(packet(stamp, (TRACK_DESCRIPTOR, descriptor(track))))

    def names(self, names: list[tuple[int, str]], categories: list[tuple[int, str]]) -> None:
        if not self.started:
            self._interned([(1, categories), (3, list(ARGUMENTS))], SEQ_INCREMENTAL_STATE_CLEARED)
            self.started, categories = True, []
        elif categories:
            self._interned([(1, categories)], 0)
        for at in range(0, len(names), NAMES_PER_PACKET):
            self._interned([(2, names[at : at + NAMES_PER_PACKET])], 0)

    def _interned(self, groups: list[tuple[int, list[tuple[int, str]]]], flags: int) -> None:
        entries = [(number, [E.message((1, iid), (2, text)) for iid, text in items]) for number, items in groups]
        data = E.message(*entries)
        self._write(
            packet(
                (SEQUENCE_ID, SEQUENCE),
                (SEQUENCE_FLAGS, flags | SEQ_NEEDS_INCREMENTAL_STATE),
                (INTERNED_DATA, data),
            )
        )

    def slices(self, events: SliceEvents) -> None:
        for lo in range(0, len(events), CHUNK):
            self._write(_slice_packets(events.part(lo, lo + CHUNK)).data)

    def counters(self, events: CounterEvents) -> None:
        for lo in range(0, len(events), CHUNK):
            ts, uuid, value = (a[lo : lo + CHUNK] for a in (events.ts, events.uuid, events.value))
            body = [
                *E.scalar_field(TYPE, np.full(len(ts), COUNTER)),
                *E.scalar_field(TRACK_UUID, uuid),
                *E.double_field(DOUBLE_COUNTER_VALUE, value, np.ones(len(ts), bool)),
            ]
            self._write(_framed(ts, body).data)

    def close(self) -> None:
        if not self.started:  # no event at all: still a valid trace with its sequence set up
            self.names([], [])


def _slice_packets(ev: SliceEvents) -> E.Rows:
    opens = ev.type != END
    rows = ev.rows
    launched = opens & (rows["flags"] & LAUNCHED > 0)
    body = [
        *E.scalar_field(TYPE, ev.type),
        *E.scalar_field(TRACK_UUID, ev.uuid),
        *E.scalar_field(NAME_IID, rows["name"], opens & (rows["name"] > 0)),
        *E.scalar_field(CATEGORY_IIDS, rows["cat"], opens),
        *_argument(EVENT_ID_ARG, rows["key"] & EVENT_ID_MASK, opens),
        *_argument(CORRELATION_ARG, rows["corr"], opens & (rows["corr"] >= 0)),
        *E.repeated_fixed64(FLOW_IDS, ev.flow_ids, ev.flow_counts),
        *E.repeated_fixed64(TERMINATING_FLOW_IDS, rows["key"][launched], launched.astype(np.int64)),
    ]
    return _framed(ev.ts, body)


def _argument(iid: int, values: np.ndarray, present: np.ndarray) -> E.Parts:
    """An integer debug annotation (``DebugAnnotation{name_iid, int_value}``) where ``present``."""
    head = E.constant(E.tag(1, E.VARINT) + E.varint(iid), np.ones(len(values), bool))
    return E.nested(DEBUG_ANNOTATIONS, [head, *E.scalar_field(4, values)], present)


def _framed(ts: np.ndarray, track_event: E.Parts) -> E.Rows:
    """Each TrackEvent in its TracePacket (time, sequence), each packet as a field of ``Trace``."""
    n = len(ts)
    tail = E.message((SEQUENCE_ID, SEQUENCE), (SEQUENCE_FLAGS, SEQ_NEEDS_INCREMENTAL_STATE))
    body = [
        *E.scalar_field(TIMESTAMP, ts),
        *E.nested(TRACK_EVENT, track_event),
        E.constant(tail, np.ones(n, bool)),
    ]
    return E.concat(E.nested(1, body))
