"""What the writer hands to an output format: track events in the order they are written.

``SliceEvents`` are the begin, end and instant events of one time bucket, track after track;
``CounterEvents`` its counter samples. Both formats (Perfetto protobuf, Chrome JSON) take
these and nothing else, so that the nesting and the flows are decided once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from traceconv.render.perfetto.tracks import Track

Array = np.ndarray[Any, Any]


@dataclass(frozen=True)
class SliceEvents:
    ts: Array  # int64 ns
    type: Array  # nesting.BEGIN, END, INSTANT_EVENT
    uuid: Array  # the lane's track
    record: Array  # index into ``records`` of each begin or instant (-1 for ends)
    records: Array  # the records of the bucket, sorted
    flow_counts: Array  # flows that leave each event (launch -> its GPU work); 0 for ends
    flow_ids: Array  # their ids, event after event

    def __len__(self) -> int:
        return len(self.ts)

    @property
    def rows(self) -> Array:
        """The record of each event (for ends: the first record, unused)."""
        return self.records[np.maximum(self.record, 0)]

    def part(self, lo: int, hi: int) -> SliceEvents:
        """Events ``lo`` to ``hi`` (their flows with them)."""
        first = int(self.flow_counts[:lo].sum())
        count = int(self.flow_counts[lo:hi].sum())
        return SliceEvents(
            self.ts[lo:hi],
            self.type[lo:hi],
            self.uuid[lo:hi],
            self.record[lo:hi],
            self.records,
            self.flow_counts[lo:hi],
            self.flow_ids[first : first + count],
        )


@dataclass(frozen=True)
class CounterEvents:
    ts: Array
    uuid: Array
    value: Array  # float64

    def __len__(self) -> int:
        return len(self.ts)


class Sink(Protocol):
    """An output format."""

    def tracks(self, tracks: list[Track], ts: int) -> None:
        """Describe tracks before their first event (``ts``: the time of the events that follow)."""

    def names(self, names: list[tuple[int, str]], categories: list[tuple[int, str]]) -> None:
        """Interned strings, before the events that use them."""

    def slices(self, events: SliceEvents) -> None: ...

    def counters(self, events: CounterEvents) -> None: ...

    def close(self) -> None:
        """Everything is written (the file's last bytes)."""
