"""The matched collectives as records, and what they say of each rank: waits and last arrivals."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from traceconv.analyses import intervals as I
from traceconv.analyses.ranks.calls import Calls, algorithm, bus_factor, message_bytes
from traceconv.analyses.ranks.match import Group
from traceconv.analyses.ranks.model import Collective


@dataclass
class Tally:
    """Per rank: matched collectives, time waited for the last rank, arrivals last, others' wait caused;
    and the same of the collectives inside the rank's steps (``steps_*``), the ones a per-step figure
    may be divided by the steps."""

    matched: int = 0
    wait_ns: int = 0
    last_arrivals: int = 0
    caused_ns: int = 0
    steps_matched: int = 0
    steps_last_arrivals: int = 0
    steps_caused_ns: int = 0


@dataclass
class Across:
    collectives: list[Collective] = field(default_factory=list)
    tallies: dict[int, Tally] = field(default_factory=dict)
    unmatched: int = 0


Segments = tuple[I.I64, I.I64]


def across(
    calls: Sequence[Calls],
    found: Sequence[Group],
    offsets: dict[int, int | None],
    steps: Sequence[Segments | None] = (),
) -> Across:
    """Every complete instance of every group as a :class:`Collective`; the rest counted unmatched.
    ``steps``: per rank, the windows of its steps (on its own clock), or None."""
    out = Across(tallies={i: Tally() for i in range(len(calls))})
    matched_rows = 0
    windows = list(steps) + [None] * (len(calls) - len(steps))
    for g in found:
        for seq, members in g.complete(calls).items():
            out.collectives.append(_record(calls, g, seq, members, offsets, out.tallies, windows))
            matched_rows += len(members)
    out.unmatched = sum(len(c.rows) for c in calls) - matched_rows
    out.collectives.sort(key=lambda c: (min(c.start_ns.values()), c.process_group, c.seq))
    return out


def _record(
    calls: Sequence[Calls],
    g: Group,
    seq: int,
    members: dict[int, int],
    offsets: dict[int, int | None],
    tallies: dict[int, Tally],
    windows: Sequence[Segments | None],
) -> Collective:
    rows = {m: calls[m].rows.iloc[i] for m, i in members.items()}
    labels = {m: calls[m].unit.label for m in members}
    start = {m: int(r["start_ns"]) + (offsets.get(m) or 0) for m, r in rows.items()}
    last = max(start, key=lambda m: (start[m], -m))
    first_row = rows[g.reference] if g.reference in rows else next(iter(rows.values()))
    size = _first(rows, "group_size")
    n = size if size is not None else len(members)
    nbytes = message_bytes(_first(rows, "in_nelems"), _first(rows, "out_nelems"), _text(first_row["dtype"]))
    time_ns = int(rows[last]["dur_ns"])
    name = str(first_row["collective"])
    algbw, busbw = _bandwidth(name, nbytes, time_ns, n)
    own = {m: int(r["start_ns"]) for m, r in rows.items()}
    _tally(tallies, start, last, {m: _inside(own[m], windows[m]) for m in members})
    return Collective(
        collective=name,
        process_group=g.name,
        seq=seq,
        ranks=[labels[m] for m in sorted(members)],
        dtype=_text(first_row["dtype"]),
        in_nelems=_first(rows, "in_nelems"),
        out_nelems=_first(rows, "out_nelems"),
        bytes=nbytes,
        group_size=n,
        algorithm=algorithm(str(first_row["name"])),
        start_ns={labels[m]: start[m] for m in sorted(members)},
        dur_ns={labels[m]: int(rows[m]["dur_ns"]) for m in sorted(members)},
        skew_ns=max(start.values()) - min(start.values()),
        last_rank=labels[last],
        time_ns=time_ns,
        algbw_gbps=algbw,
        busbw_gbps=busbw,
    )


def _bandwidth(name: str, nbytes: int | None, time_ns: int, n: int) -> tuple[float | None, float | None]:
    """NCCL-tests' algbw = S / t and busbw = algbw x factor, in GB/s (bytes per ns)."""
    if nbytes is None or time_ns <= 0:
        return None, None
    algbw = nbytes / time_ns
    return round(algbw, 3), round(algbw * bus_factor(name, n), 3)


def _tally(tallies: dict[int, Tally], start: dict[int, int], last: int, in_steps: dict[int, bool]) -> None:
    """Each rank waited from its start to the last rank's; the last rank caused all of it."""
    caused = sum(start[last] - s for s in start.values())
    for m, s in start.items():
        tallies[m].matched += 1
        tallies[m].wait_ns += start[last] - s
        tallies[m].steps_matched += in_steps[m]
    tallies[last].last_arrivals += 1
    tallies[last].caused_ns += caused
    if in_steps[last]:
        tallies[last].steps_last_arrivals += 1
        tallies[last].steps_caused_ns += caused


def _inside(t: int, windows: Segments | None) -> bool:
    if windows is None or not len(windows[0]):
        return False
    at = int(np.searchsorted(windows[0], t, side="right")) - 1
    return at >= 0 and t < int(windows[1][at])


def _first(rows: dict[int, pd.Series], column: str) -> int | None:
    """The first rank's value of an integer field that the trace gives (ranks agree where matched)."""
    for r in rows.values():
        if not pd.isna(r[column]):
            return int(r[column])
    return None


def _text(v: object) -> str | None:
    return v if isinstance(v, str) and v else None
