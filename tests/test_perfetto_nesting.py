"""The lanes (every track properly nested) and the protobuf encoder, on their own.

The sweep is checked on random intervals (hypothesis) against a replay of its own events:
on every lane, each end closes the innermost open slice, at that slice's end, in time order;
every slice is there once, on the first lane where it nests, whatever the time buckets were.
The encoder is checked against Perfetto's generated protobuf classes.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as P

from traceconv.render.perfetto import encoder as E
from traceconv.render.perfetto.nesting import BEGIN, END, INSTANT_EVENT, Events, Sweep, joined

interval = st.tuples(st.integers(0, 60), st.integers(0, 20), st.booleans())


def sweep(slices: list[tuple[int, int, bool]], bounds: list[int]) -> tuple[Events, np.ndarray]:
    """The events of ``slices`` (start, length, instant) swept bucket by bucket as the writer does;
    and the records in the order their indexes refer to."""
    start = np.array([s for s, _, _ in slices], np.int64)
    end = np.array([s + (0 if point else n) for s, n, point in slices], np.int64)
    point = np.array([p for _, _, p in slices], bool)
    bucket = np.searchsorted(np.array(bounds, np.int64), start, side="right")
    order = np.lexsort((np.arange(len(start)), -end, start, bucket))
    state, parts = Sweep(), []
    for b in range(len(bounds) + 1):
        rows = order[bucket[order] == b]
        events = state.run(start[rows], end[rows], point[rows], bounds[b] if b < len(bounds) else None)
        events.record[events.record >= 0] = rows[events.record[events.record >= 0]]
        parts.append(events)
    parts.append(state.close())
    return joined(parts), np.stack([start, end, point], axis=1)


def replay(events: Events, records: np.ndarray) -> dict[int, int]:
    """Each record's lane, checking on every lane: time order, ends closing the innermost open slice."""
    stacks: dict[int, list[int]] = defaultdict(list)
    last: dict[int, int] = defaultdict(lambda: -1)
    lanes: dict[int, int] = {}
    for rec, ts, lane, kind in zip(events.record, events.ts, events.lane, events.type, strict=True):
        assert ts >= last[lane], "events of a lane out of time order"
        last[lane] = ts
        stack = stacks[lane]
        if kind == END:
            assert stack, "an end with nothing open"
            top = stack.pop()
            assert records[top][1] == ts, "an end that closes another slice"
            continue
        assert rec not in lanes, "a record twice"
        lanes[int(rec)] = int(lane)
        s, e, _ = records[rec]
        assert ts == s
        assert not stack or records[stack[-1]][1] >= e, "a slice that outlives the one it is in"
        if kind == BEGIN:
            stack.append(int(rec))
        else:
            assert kind == INSTANT_EVENT
    assert not any(stacks.values()), "a slice never closed"
    assert len(lanes) == len(records)
    return lanes


@settings(max_examples=300, deadline=None)
@given(st.lists(interval, max_size=40), st.lists(st.integers(0, 60), max_size=4))
def test_every_lane_nests_whatever_the_buckets(slices: list[tuple[int, int, bool]], cuts: list[int]) -> None:
    events, records = sweep(slices, sorted(set(cuts)))
    lanes = replay(events, records)
    one_bucket, _ = sweep(slices, [])
    assert lanes == replay(one_bucket, records)  # the same lanes: buckets change only when ends are written


@settings(max_examples=300, deadline=None)
@given(st.lists(interval, max_size=30), st.lists(st.integers(0, 60), max_size=3))
def test_further_lanes_only_for_slices_that_cross(slices: list[tuple[int, int, bool]], cuts: list[int]) -> None:
    events, records = sweep(slices, sorted(set(cuts)))
    lanes = replay(events, records)
    ranges = [(s, e) for s, e, point in records.tolist() if not point]
    cross = any(a < c < b < d for a, b in ranges for c, d in ranges)
    assert (max(lanes.values(), default=0) > 0) == cross


def test_nested_ranges_and_a_stream_of_kernels_stay_on_the_track() -> None:
    nested = [(0, 10, False), (1, 3, False), (2, 1, False), (5, 0, False), (5, 0, True), (10, 5, False)]
    events, records = sweep(nested, [4, 8])
    assert set(replay(events, records).values()) == {0}


def test_crossing_ranges_get_a_lane_each() -> None:
    crossing = [(0, 10, False), (5, 10, False), (8, 10, False), (16, 1, False)]
    events, records = sweep(crossing, [6])
    assert replay(events, records) == {0: 0, 1: 1, 2: 2, 3: 0}


# -- the encoder ------------------------------------------------------------------------------
values = st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=50)


@settings(max_examples=200, deadline=None)
@given(values, values)
def test_columns_of_track_events_decode_as_perfetto_writes_them(uuids: list[int], flows: list[int]) -> None:
    n = len(uuids)
    uuid = np.array(uuids, np.int64)
    flow = np.array(flows, np.int64).view(np.uint64)
    counts = np.zeros(n, np.int64)
    counts[0] = len(flows)
    present = np.arange(n) % 2 == 0
    parts = [
        *E.scalar_field(9, np.full(n, 1)),
        *E.scalar_field(11, uuid),
        *E.scalar_field(10, np.arange(n), present),
        *E.nested(4, [*E.scalar_field(1, np.full(n, 7)), *E.scalar_field(4, uuid)], present),
        *E.repeated_fixed64(47, flow, counts),
        *E.double_field(44, uuid.astype(np.float64) / 3, ~present),
    ]
    rows = E.concat(parts)
    at = np.concatenate([[0], np.cumsum(rows.lengths)])
    for i in range(n):
        ev = P.TrackEvent.FromString(rows.data[at[i] : at[i + 1]].tobytes())
        assert ev.type == 1 and ev.track_uuid == uuids[i] % 2**64
        assert list(ev.flow_ids) == (flow.tolist() if i == 0 else [])
        if present[i]:
            assert ev.name_iid == i
            assert [(a.name_iid, a.int_value) for a in ev.debug_annotations] == [(7, uuids[i])]
        else:
            assert not ev.HasField("name_iid") and ev.double_counter_value == np.float64(uuids[i]) / 3


def test_single_messages_equal_protobufs_own() -> None:
    mine = E.message((1, 5), (2, "stream 7"), (5, 3), (3, E.message((1, 496), (6, "python3"))), (12, -1))
    theirs = P.TrackDescriptor(uuid=5, name="stream 7", parent_uuid=3, sibling_order_rank=-1)
    theirs.process.pid, theirs.process.process_name = 496, "python3"
    assert P.TrackDescriptor.FromString(mine) == theirs
    assert E.varint(2**64 - 1) == b"\xff" * 9 + b"\x01"
