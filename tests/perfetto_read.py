"""A Perfetto trace read back with Perfetto's own protos, slices rebuilt as trace processor builds them.

The protos are those the ``perfetto`` package ships (``perfetto_trace_pb2``, a test
dependency); trace processor itself is a binary that package downloads, which these machines
cannot. So this module does what its importer does for track events: interned names per
packet sequence, every track event sorted by timestamp (ties in file order), and per track a
stack: a begin opens a slice, an end closes the innermost open one, an instant is a slice of
no length. What it cannot pair is recorded (an end with nothing open, a slice left open, a
child that outlives its parent), never repaired.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as P

TE = P.TrackEvent


@dataclass
class Slice:
    track: int
    name: str
    category: str
    start: int
    end: int
    depth: int
    args: dict[str, int]
    flow_out: list[int]
    flow_in: list[int]
    instant: bool = False

    @property
    def dur(self) -> int:
        return self.end - self.start


@dataclass
class Trace:
    tracks: dict[int, Any] = field(default_factory=dict)  # uuid -> TrackDescriptor
    slices: list[Slice] = field(default_factory=list)
    counters: dict[int, list[tuple[int, float]]] = field(default_factory=lambda: defaultdict(list))
    problems: list[str] = field(default_factory=list)
    flows: dict[int, tuple[Slice, Slice]] = field(default_factory=dict)  # flow id -> (from, to)

    def track_name(self, uuid: int) -> str:
        d = self.tracks[uuid]
        return d.process.process_name if d.HasField("process") else d.name

    def path(self, uuid: int) -> list[str]:
        """The names from the root group down to track ``uuid``."""
        names = []
        while uuid:
            names.append(self.track_name(uuid))
            uuid = self.tracks[uuid].parent_uuid
        return names[::-1]


def read(path: Path) -> Trace:
    raw = P.Trace()
    raw.ParseFromString(path.read_bytes())
    out = Trace()
    events = []
    interned: dict[int, dict[tuple[int, int], str]] = defaultdict(dict)
    for order, packet in enumerate(raw.packet):
        seq = packet.trusted_packet_sequence_id
        if packet.sequence_flags & P.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED:
            interned[seq] = {}
        if packet.HasField("interned_data"):
            data = packet.interned_data
            for number, entries in (
                (1, data.event_categories),
                (2, data.event_names),
                (3, data.debug_annotation_names),
            ):
                for entry in entries:
                    interned[seq][number, entry.iid] = entry.name
        if packet.HasField("track_descriptor"):
            out.tracks[packet.track_descriptor.uuid] = packet.track_descriptor
        if packet.HasField("track_event"):  # names resolved now, in file order, as the tokenizer does
            events.append((packet.timestamp, order, packet.track_event, _names(packet.track_event, interned[seq])))
    events.sort(key=lambda e: (e[0], e[1]))
    _rebuild(out, events)
    return out


def _names(ev: Any, interned: dict[tuple[int, int], str]) -> tuple[str, str, dict[str, int]]:
    """The event's name, categories and arguments, its interned ids looked up."""
    name = interned.get((2, ev.name_iid), ev.name)
    category = ",".join(interned.get((1, c), "?") for c in ev.category_iids)
    args = {interned.get((3, a.name_iid), a.name): a.int_value for a in ev.debug_annotations}
    return name, category, args


def _rebuild(out: Trace, events: list[Any]) -> None:
    stacks: dict[int, list[Slice]] = defaultdict(list)
    open_flows: dict[int, Slice] = {}
    for ts, _, ev, names in events:
        if ev.track_uuid not in out.tracks:
            out.problems.append(f"event on undescribed track {ev.track_uuid}")
        stack = stacks[ev.track_uuid]
        if ev.type == TE.TYPE_COUNTER:
            out.counters[ev.track_uuid].append((ts, ev.double_counter_value or float(ev.counter_value)))
        elif ev.type == TE.TYPE_SLICE_END:
            if not stack:
                out.problems.append(f"end at {ts} on track {ev.track_uuid} with no open slice")
                continue
            top = stack.pop()
            top.end = ts
            if stack and ts > stack[-1].end >= 0:
                out.problems.append(f"slice {top.name} outlives its parent on track {ev.track_uuid}")
        elif ev.type in (TE.TYPE_SLICE_BEGIN, TE.TYPE_INSTANT):
            name, category, args = names
            s = Slice(
                track=ev.track_uuid,
                name=name,
                category=category,
                start=ts,
                end=ts if ev.type == TE.TYPE_INSTANT else -1,
                depth=len(stack),
                args=args,
                flow_out=list(ev.flow_ids),
                flow_in=list(ev.terminating_flow_ids),
                instant=ev.type == TE.TYPE_INSTANT,
            )
            out.slices.append(s)
            for fid in s.flow_in:
                if fid in open_flows:
                    out.flows[fid] = (open_flows.pop(fid), s)
                else:
                    out.problems.append(f"flow {fid} ends at {s.name} before it starts")
            for fid in s.flow_out:
                open_flows[fid] = s
            if ev.type == TE.TYPE_SLICE_BEGIN:
                stack.append(s)
    for uuid, stack in stacks.items():
        for s in stack:
            out.problems.append(f"slice {s.name} at {s.start} on track {uuid} never ends")
    for fid, s in open_flows.items():
        out.problems.append(f"flow {fid} from {s.name} never arrives")
