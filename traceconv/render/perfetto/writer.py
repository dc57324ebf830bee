"""Inputs in, one timeline file out: the passes over each input and the order events are written in.

Per input: a survey (start times only), a scan that turns rows into records on tracks and
spills them into time buckets, then the buckets in time order: sorted by track and start,
nested into lanes (:mod:`nesting`), flows looked up, handed to the output format. Memory is
bounded by a bucket (about ``source.BUCKET_ROWS`` rows), the tracks and names, and one
(launch, GPU row) pair per linked GPU row; never by the input.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from traceconv.errors import TraceconvError, UsageError
from traceconv.render.perfetto.events import CounterEvents, Sink, SliceEvents
from traceconv.render.perfetto.nesting import BEGIN, END, INSTANT_EVENT, Events, Sweep
from traceconv.render.perfetto.records import COUNTER, INSTANT, RECORD, Spill, Strings
from traceconv.render.perfetto.scan import Scanner
from traceconv.render.perfetto.source import Input, offsets_for, open_inputs, survey
from traceconv.render.perfetto.tracks import Tracks

FORMATS = ("proto", "json")
Array = np.ndarray[Any, Any]


@dataclass
class ExportResult:
    """What was written: counts of each kind of event, and the rows left out (by reason)."""

    path: Path
    format: str
    bytes: int = 0
    inputs: list[str] = field(default_factory=list)
    slices: int = 0
    instants: int = 0
    counters: int = 0
    flows: int = 0
    tracks: int = 0
    lanes: int = 0  # tracks added for slices that overlap without nesting
    shift_ns: int = 0  # added to every time: some were negative (a relative clock, or an offset)
    skipped: dict[str, int] = field(default_factory=dict)


@dataclass
class Timeline:
    """What every input of one output shares: its tracks and interned strings."""

    tracks: Tracks = field(default_factory=Tracks)
    names: Strings = field(default_factory=Strings)
    categories: Strings = field(default_factory=Strings)
    next_seq: int = 1


def export(
    inputs: Sequence[Path], out: Path, fmt: str = "proto", offsets: Mapping[str, int] | None = None
) -> ExportResult:
    """Write ``inputs`` (traces, Nsight Systems files, traceconv Parquet) as one timeline at ``out``.

    ``fmt`` is ``proto`` (Perfetto's protobuf trace) or ``json`` (Chrome's JSON trace format);
    ``offsets`` maps an input (as given, its file name or stem) or a trace_id to nanoseconds
    added to its times.
    """
    if fmt not in FORMATS:
        raise UsageError(None, f"unknown format {fmt!r}", f"choose from {', '.join(FORMATS)}")
    if not inputs:
        raise UsageError(None, "no input given", "name at least one trace, report or Parquet file")
    from traceconv.render.perfetto.chrome import ChromeSink
    from traceconv.render.perfetto.proto import ProtoSink

    _check_output(Path(out), [Path(p) for p in inputs])
    result = ExportResult(path=Path(out), format=fmt, inputs=[str(p) for p in inputs])
    with tempfile.TemporaryDirectory(prefix="traceconv-perfetto-") as tmp:
        sources = open_inputs([Path(p) for p in inputs], Path(tmp))
        for source in sources:
            survey(source)
        shifts = offsets_for(sources, offsets or {})
        earliest = _earliest(sources, shifts)
        if earliest < 0 and fmt == "proto":  # Perfetto's timestamps are unsigned
            result.shift_ns = -earliest
            shifts = {key: value - earliest for key, value in shifts.items()}
            earliest = 0
        with _atomic(Path(out)) as fh:
            sink: Sink = ProtoSink(fh) if fmt == "proto" else ChromeSink(fh, earliest)
            timeline = Timeline()
            for i, source in enumerate(sources):
                _one_input(i, source, shifts, timeline, sink, result, Path(tmp))
            sink.close()
            result.bytes = fh.tell()
    result.tracks = len(timeline.tracks.tracks)
    return result


def _earliest(sources: list[Input], shifts: dict[tuple[int, str | None], int]) -> int:
    """A time at or before every event of the output (Chrome JSON's times are counted from it)."""
    firsts = [
        s.first_ns + min(v for (i, _), v in shifts.items() if i == n)
        for n, s in enumerate(sources)
        if s.first_ns is not None
    ]
    return min(firsts, default=0)


def _one_input(
    index: int,
    source: Input,
    shifts: dict[tuple[int, str | None], int],
    timeline: Timeline,
    sink: Sink,
    result: ExportResult,
    tmp: Path,
) -> None:
    """Scan the input into time buckets, describe its tracks and names, then write bucket by bucket."""
    seq_of, offsets = _traces(index, source, shifts, timeline)
    scanner = Scanner(timeline.tracks, timeline.names, timeline.categories, seq_of, offsets)
    whole = shifts.get((index, None), min(offsets.values(), default=0))
    folder = tmp / f"buckets{index}"
    folder.mkdir()
    spill = Spill(folder, source.bounds + whole)
    try:
        _scan(source, scanner, spill)
    except BaseException:
        spill.discard()
        raise
    timeline.tracks.finish()
    sink.tracks(timeline.tracks.take_pending(), max((source.first_ns or 0) + whole, 0))
    sink.names(timeline.names.take_new(), timeline.categories.take_new())
    _write_buckets(spill, _launch_index(scanner.launches), timeline.tracks, sink, result)
    for reason, count in scanner.skipped.items():
        result.skipped[reason] = result.skipped.get(reason, 0) + count


def _scan(source: Input, scanner: Scanner, spill: Spill) -> None:
    for batch in source.batches():
        spill.add(scanner.batch(batch))


def _write_buckets(
    spill: Spill, launches: tuple[Array, Array], tracks: Tracks, sink: Sink, result: ExportResult
) -> None:
    sweeps: dict[int, Sweep] = {}
    totals: dict[int, float] = {}
    for recs, bound in spill.buckets():
        counter = (recs["flags"] & COUNTER) > 0
        slices, samples = _sorted(recs, ~counter, True), _sorted(recs, counter, False)
        del recs, counter  # one sorted copy of the bucket is held, not two
        _emit(sink, tracks, _slice_events(slices, bound, sweeps, tracks, launches), result)
        counters = _counter_events(samples, tracks, totals)
        sink.counters(counters)
        result.counters += len(counters)
    _emit(sink, tracks, _closing(sweeps, tracks), result)


def _traces(
    index: int, source: Input, shifts: dict[tuple[int, str | None], int], timeline: Timeline
) -> tuple[dict[str | None, int], dict[int, int]]:
    """A number and a label for each trace of the input, and its offset."""
    seq_of: dict[str | None, int] = {}
    offsets: dict[int, int] = {}
    for trace_id in source.trace_ids or [None]:
        seq = seq_of[trace_id] = timeline.next_seq
        timeline.next_seq += 1
        several = len(source.trace_ids) > 1
        timeline.tracks.labels[seq] = f"{source.label} · {trace_id}" if several else source.label
        offsets[seq] = shifts.get((index, trace_id), 0)
    return seq_of, offsets


def _emit(sink: Sink, tracks: Tracks, events: SliceEvents, result: ExportResult) -> None:
    lanes = tracks.take_pending()
    if lanes:
        sink.tracks(lanes, int(events.ts[0]) if len(events) else 0)
        result.lanes += len(lanes)
    sink.slices(events)
    result.slices += int(np.count_nonzero(events.type == BEGIN))
    result.instants += int(np.count_nonzero(events.type == INSTANT_EVENT))
    result.flows += len(events.flow_ids)


def _launch_index(parts: list[Array]) -> tuple[Array, Array]:
    """(launch keys sorted, the flow id of each): every GPU row linked to its launching call."""
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    pairs = np.concatenate(parts)
    order = np.argsort(pairs[:, 0], kind="stable")
    return pairs[order, 0], pairs[order, 1]


def _sorted(recs: Array, rows: Array, slices: bool) -> Array:
    """The records where ``rows``, by track, then start (slices: the longest first), then key."""
    picked = np.flatnonzero(rows)
    key, start, track = recs["key"][picked], recs["start"][picked], recs["track"][picked]
    keys = (key, -recs["end"][picked], start, track) if slices else (key, start, track)
    return recs[picked[np.lexsort(keys)]]


def _slice_events(
    rows: Array, bound: int | None, sweeps: dict[int, Sweep], tracks: Tracks, launches: tuple[Array, Array]
) -> SliceEvents:
    """One bucket's slices and instants (sorted), track by track, nested into lanes, with their flows."""
    cuts = [0, *(np.flatnonzero(np.diff(rows["track"])) + 1).tolist(), len(rows)]
    parts: list[tuple[Events, Array]] = []
    for lo, hi in itertools.pairwise(cuts):
        if lo == hi:
            continue
        track = int(rows["track"][lo])
        part = rows[lo:hi]
        sweep = sweeps.setdefault(track, Sweep())
        events = sweep.run(part["start"], part["end"], (part["flags"] & INSTANT) > 0, bound)
        events.record[events.record >= 0] += lo
        parts.append((events, _lane_uuids(tracks, track, events.lane)))
    return _slice_batch(parts, rows, launches)


def _closing(sweeps: dict[int, Sweep], tracks: Tracks) -> SliceEvents:
    parts = []
    for track, sweep in sweeps.items():
        events = sweep.close()
        parts.append((events, _lane_uuids(tracks, track, events.lane)))
    return _slice_batch(parts, np.zeros(1, RECORD), (np.zeros(0, np.int64), np.zeros(0, np.int64)))


def _lane_uuids(tracks: Tracks, track: int, lanes: Array) -> Array:
    deepest = int(lanes.max()) if len(lanes) else 0
    lut = np.array([tracks.lane(track, level) for level in range(deepest + 1)], np.int64)
    return lut[lanes]


def _slice_batch(parts: list[tuple[Events, Array]], rows: Array, launches: tuple[Array, Array]) -> SliceEvents:
    if not parts:
        empty = np.zeros(0, np.int64)
        return SliceEvents(empty, empty.astype(np.uint8), empty, empty, rows, empty, empty)
    record = np.concatenate([p.record for p, _ in parts])
    kind = np.concatenate([p.type for p, _ in parts])
    event_keys = rows["key"][np.maximum(record, 0)]
    keys, flow_ids = launches
    lo = np.searchsorted(keys, event_keys, "left")
    counts = np.where(kind != END, np.searchsorted(keys, event_keys, "right") - lo, 0)
    starts = np.repeat(lo - (np.cumsum(counts) - counts), counts)
    return SliceEvents(
        ts=np.concatenate([p.ts for p, _ in parts]),
        type=kind,
        uuid=np.concatenate([u for _, u in parts]),
        record=record,
        records=rows,
        flow_counts=counts,
        flow_ids=flow_ids[starts + np.arange(int(counts.sum()))],
    )


def _counter_events(rows: Array, tracks: Tracks, totals: dict[int, float]) -> CounterEvents:
    """One bucket's counter samples (sorted), track by track in time order; running sums carried on."""
    values = rows["value"].astype(np.float64)
    cuts = [0, *(np.flatnonzero(np.diff(rows["track"])) + 1).tolist(), len(rows)]
    for lo, hi in itertools.pairwise(cuts):
        track = int(rows["track"][lo]) if hi > lo else -1
        if hi > lo and tracks.tracks[track].running_sum:
            values[lo:hi] = np.cumsum(values[lo:hi]) + totals.get(track, 0.0)
            totals[track] = float(values[hi - 1])
    uuid = np.array([t.uuid for t in tracks.tracks], np.int64)[rows["track"]] if len(rows) else rows["track"]
    return CounterEvents(rows["start"], uuid.astype(np.int64), values)


def _check_output(out: Path, inputs: list[Path]) -> None:
    """Refuse an output that is an input (or inside one, a dataset directory), or a directory."""
    target = out.resolve()
    for src in inputs:
        if target == src.resolve() or src.resolve() in target.parents:
            raise UsageError(out, "is an input of this command: writing there would destroy it", "give -o another name")
    if out.is_dir():
        raise UsageError(out, "is a directory", "give -o a file name, e.g. trace.pftrace")


@contextlib.contextmanager
def _atomic(out: Path) -> Iterator[BinaryIO]:
    """``out`` written under a temporary name beside it and renamed when complete."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb", buffering=1 << 20) as fh:
            yield fh
        os.replace(tmp, out)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise TraceconvError(
                out,
                f"could not be written: no space left ({exc.strerror})",
                f"free disk space there and in {tempfile.gettempdir()} (temporary files; set TMPDIR to use another)",
            ) from exc
        raise
