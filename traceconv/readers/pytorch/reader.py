"""PyTorch profiler (Kineto Chrome trace JSON, plain or gzip) -> unified tables, in bounded chunks.

Pass 1 decodes chunks of events into unified columns and fills a compact link index; the
chunk tables are kept in memory while small and spilled to temporary Arrow files beyond
``spill.SPILL_BYTES``. Pass 2 adds the links (launching API call, CPU operator, thread
names) and the absolute time base, a row group (several chunks) at a time.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa

from traceconv import schema as S
from traceconv.errors import InputError, TraceconvError
from traceconv.parquet_join import NewWriter, Piece, encode
from traceconv.process import paused_gc, return_freed_memory
from traceconv.readers.arrow_util import identity
from traceconv.readers.base import GZIP_MAGIC, Progress, TraceInfo, trace_stem, unlaunched_note
from traceconv.readers.occupancy_columns import Devices, with_occupancy
from traceconv.readers.pytorch.chunker import CHUNK, EventChunks
from traceconv.readers.pytorch.columns import ChunkContext, build
from traceconv.readers.pytorch.cuts import Span
from traceconv.readers.pytorch.damage import Damage
from traceconv.readers.pytorch.decode import Decoded, decode_events
from traceconv.readers.pytorch.links import LinkIndex
from traceconv.readers.pytorch.op_rows import OpRows
from traceconv.readers.pytorch.pass2 import Done, GroupPool
from traceconv.readers.pytorch.repair import RobustDecoder
from traceconv.readers.pytorch.spill import SegmentFile, Spill, row_groups
from traceconv.readers.pytorch.times import needs_exact, unpadded_fractions
from traceconv.readers.pytorch.workers import ChunkPool, Taken, Unsuitable, worker_count

ABSOLUTE_US = 10**15  # microsecond timestamps past this (2001-09) are Unix epoch times
METADATA_KEYS_SKIPPED = ("traceEvents",)
PARALLEL_CHUNKS = 6  # smaller traces are done before worker processes would pay off
# Rows written together as one Parquet row group (at least; whole chunks are gathered). Each
# row group costs the writer (the slower side of pass 2) a fixed time for every column, even
# an all-null one; larger groups cost the main process memory in pass 2.
ROW_GROUP_ROWS = 16_000
LOOKUP_THREADS = 7  # the most threads (beside this one) that the link index's lookups take
GZIP_RATIO = 8  # a Kineto trace compresses about 10x: the size a .gz is guessed to expand to
# Pass 2 in worker processes from this many workers on. Below it (two cores) this process
# links while a thread encodes, as fast as one worker beside it and without that worker's
# row group in memory (bench/README.md).
PASS2_WORKERS = 2


class StrictDecoder:
    """One chunk's events with exact times where a float64 would lose nanoseconds (no repairs).

    Whether a chunk's times are read exactly follows :func:`needs_exact` alone; the decoder
    only remembers which decode the last chunk needed and tries that one first (a trace has
    one clock), so that traces of absolute times are not decoded twice per chunk.
    """

    def __init__(self) -> None:
        self.exact_first = False

    def __call__(self, chunk: bytes, unpadded: bool) -> Decoded:
        if unpadded:
            return decode_events(chunk, True)
        if self.exact_first:
            decoded = decode_events(chunk, True)
            if not needs_exact(chunk, decoded.events):
                decoded = decode_events(chunk, False)
        else:
            decoded = decode_events(chunk, False)
            if needs_exact(chunk, decoded.events):
                decoded = decode_events(chunk, True)
        self.exact_first = decoded.exact
        return decoded


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(2) == GZIP_MAGIC


class _Pending:
    """Stands for a chunk handed to a worker (its events are counted when its table comes back)."""

    def __len__(self) -> int:
        return 0


_Pass1 = tuple["LinkIndex", "Spill", "OpRows", dict[str, Any]]


class PytorchReader:
    OPTIONS: ClassVar[frozenset[str]] = frozenset({"salvage", "workers", "chunk_size"})

    def __init__(
        self,
        path: Path,
        progress: Progress | None = None,
        chunk_size: int = CHUNK,
        salvage: bool = False,
        workers: int | None = None,
    ) -> None:
        self.path = Path(path)
        self.info = TraceInfo(path=self.path, source="pytorch", trace_id=trace_stem(self.path))
        self._progress = progress
        self._chunk_size = chunk_size
        self._salvage = salvage
        self._workers = workers
        self._unpadded: bool | None = None
        self._events = 0
        self.workers_used = 0  # worker processes that did pass 1 (0: this process did)
        self.chunks_here = 0  # with workers: the chunks this process converted while they were busy
        self._decode_strict = StrictDecoder()
        self._devices = Devices.kineto(None)  # the GPUs' properties, read with the metadata (pass 2)

    def one_process(self) -> bool:
        """Whether this trace is converted in this process alone (too small for workers to pay)."""
        size = os.path.getsize(self.path)
        return size * (GZIP_RATIO if _is_gzip(self.path) else 1) < PARALLEL_CHUNKS * self._chunk_size

    def _detect_unpadded(self, chunk: bytes | Span) -> bool:
        """Decided once, from the first chunk (a trace has one writer)."""
        if self._unpadded is None:
            self._unpadded = unpadded_fractions(bytes(chunk))
            if self._unpadded:
                self.info.notes.append(
                    "timestamps written without zero-padded decimals (Kineto before 2024-04) "
                    "were read as microseconds + nanoseconds"
                )
        return self._unpadded

    def _strict(self, chunk: bytes) -> Decoded:
        return self._decode_strict(chunk, self._detect_unpadded(chunk))

    def tables(self) -> Iterator[pa.Table]:
        index, spill, base = self._prepared()
        try:
            for group in row_groups(spill, ROW_GROUP_ROWS):
                yield self._group(index, group, base)
        finally:
            spill.close()
        self._finish(index)

    def encoded(self, new_writer: NewWriter, tally: Callable[[pa.Table], Any]) -> Iterator[Done] | None:
        """The row groups encoded as Parquet by worker processes (``pass2``), in order, with each
        one's ``tally``; None where this trace is converted in one process (``tables`` then)."""
        workers = 0 if self._salvage else worker_count(self._workers)
        if workers < PASS2_WORKERS or self.one_process():
            return None
        return self._encoded(workers, new_writer, tally)

    def _encoded(self, workers: int, new_writer: NewWriter, tally: Callable[[pa.Table], Any]) -> Iterator[Done]:
        index, spill, base = self._prepared()
        try:
            groups = spill.groups(ROW_GROUP_ROWS)

            def convert(number: int) -> tuple[Piece, tuple[Any, int]]:
                before = index.unlaunched  # counted by the caller, from every process's reply
                table = self._group(index, spill.tables(groups[number]), base)
                unlaunched, index.unlaunched = index.unlaunched - before, before
                return encode(table, new_writer), (tally(table), unlaunched)

            with GroupPool(workers, convert, lambda number: spill.release(groups[number])) as pool:
                for piece, source, (counted, unlaunched) in pool.map(len(groups)):
                    index.unlaunched += unlaunched
                    yield piece, source, counted
        finally:
            spill.close()
        self._finish(index)

    def _prepared(self) -> tuple[LinkIndex, Spill, int]:
        """Pass 1 (in worker processes where it pays) and the link index: what every row group needs."""
        size = os.path.getsize(self.path)
        progress = (lambda done: self._progress(done, size)) if self._progress else None  # type: ignore[misc]
        workers = 0 if self._salvage else worker_count(self._workers)
        state = None
        gzip = workers > 0 and _is_gzip(self.path)
        if workers and not self.one_process():
            state = self._pass1_parallel(workers, progress, plain=not gzip)
        if state is None:
            state = self._pass1(progress)
        index, spill, op_spill, top = state
        if not self._events:
            for held in (spill, op_spill):
                held.close()
            raise self._no_events()
        try:
            self._describe(top, spill.min_start)
            try:
                # the workers wait for the link index: its lookups take their cores
                index.finalize(op_spill, self._events, threads=min(workers, LOOKUP_THREADS) + 1 if workers else 1)
            finally:
                op_spill.close()
        except BaseException:
            spill.close()
            raise
        return_freed_memory()
        self._devices = Devices.kineto(self.info.metadata.get("deviceProperties"))
        return index, spill, int(self.info.metadata.get("baseTimeNanoseconds") or 0)

    def _no_events(self) -> InputError:
        """A trace without one event to convert: said, not written as an empty file."""
        if self.info.partial:
            return InputError(self.path, "holds no complete event: every event was damaged", "re-copy the file")
        return InputError(
            self.path,
            "holds no events (its array of events is empty): nothing to convert",
            "profile again with the profiler recording (an active step of its schedule, prof.step() in the loop) "
            "and export that trace",
        )

    def _group(self, index: LinkIndex, group: list[pa.Table], base: int) -> pa.Table:
        """One row group's tables, linked and stamped (pure given the index: runs in pass-2 workers)."""
        wide = pa.concat_tables(
            [S.conform(dict(zip(t.column_names, t.columns, strict=True)), t.num_rows) for t in group]
        )
        return _stamp(with_occupancy(index.resolve(wide, base), self._devices), self.info)

    def _finish(self, index: LinkIndex) -> None:
        self.info.counters["events"] = self._events
        if index.unlaunched:
            self.info.counters["gpu_rows_without_launch"] = index.unlaunched
            self.info.notes.append(unlaunched_note(index.unlaunched, "trace"))

    def _pass1(self, progress: Callable[[int], None] | None) -> _Pass1:
        """Read, decode and build every chunk in this process (every repair and salvage path)."""
        chunks: EventChunks
        robust = RobustDecoder(self._strict, Damage(), self._salvage)

        def decode(chunk: bytes) -> Decoded:
            robust.chunk_offset = chunks.offset
            return robust(chunk)

        chunks = EventChunks(self.path, decode, progress, self._chunk_size, self._salvage)
        robust.damage = chunks.damage
        index, spill, op_spill = LinkIndex(), Spill(), OpRows()
        try:
            with paused_gc():  # pass 1 allocates millions of short-lived objects without cycles
                for decoded in chunks:
                    ctx = ChunkContext(self._events, decoded.exact, bool(self._unpadded), chunks.damage.repairs)
                    table = build(decoded, ctx)
                    del decoded
                    self._add(table, index, spill, op_spill)
        except BaseException:  # an error, an interrupt: no temporary files left behind
            spill.close()
            op_spill.close()
            raise
        self._record_damage(chunks.damage, robust.repairs)
        return index, spill, op_spill, chunks.document.top

    def _pass1_parallel(self, workers: int, progress: Callable[[int], None] | None, plain: bool) -> _Pass1 | None:
        """Pass 1 with decoding and building in worker processes; None where a chunk needs more than
        the strict path and its repairs (a cut inside a string, damage, errors): :meth:`_pass1`
        then converts the trace, with the exact error where there is one."""
        index, spill, op_spill = LinkIndex(), Spill(), OpRows()
        files = [spill.adopt(SegmentFile()) for _ in range(workers + 1)]  # the workers', then this process's
        repairs: Counter[str] = Counter()
        notes = list(self.info.notes)

        def take(results: Iterator[Taken]) -> None:
            for worker, info, parts in results:
                ops = index.add_parts(parts, self._events)
                if ops is not None:
                    op_spill.append(ops)
                if "ops_at" in parts:  # a worker wrote them: their texts' codes, in chunk order
                    codes = index.text_codes(parts["op_texts"])
                    op_spill.add_segment(files[worker], parts["ops_at"], codes, self._events)
                spill.add_segment(files[worker], info["pos"], info["length"], self._events, info["start"], info["rows"])
                self._events += info["rows"]
                repairs.update(info["repairs"])

        def dispatch(chunk: bytes | Span) -> _Pending:
            source = (str(self.path), chunks.offset) if plain else None  # a chunk starts at the offset
            take(pool.submit(chunk, self._detect_unpadded(chunk), source))
            return _Pending()

        try:
            with ChunkPool([f.path for f in files[:-1]], StrictDecoder(), local=files[-1]) as pool, paused_gc():
                chunks = EventChunks(self.path, dispatch, progress, self._chunk_size, salvage=False, positioned=plain)
                for _ in chunks:
                    pass
                take(pool.drain())
        except (Unsuitable, TraceconvError):
            for held in (spill, op_spill):
                held.close()
            self.info.notes, self._unpadded, self._events = notes, None, 0
            return None
        except BaseException:  # interrupted, out of memory: no temporary files left behind
            for held in (spill, op_spill):
                held.close()
            raise
        self._record_damage(chunks.damage, repairs)  # the chunker's own repairs and the workers'
        self.workers_used = workers
        self.chunks_here = pool.converted_here
        return index, spill, op_spill, chunks.document.top

    def _add(self, table: pa.Table, index: LinkIndex, spill: Spill, op_spill: OpRows) -> None:
        self._events += table.num_rows
        ops = index.add(table)
        if ops is not None:
            op_spill.append(ops)
        spill.append(table)

    def _record_damage(self, damage: Damage, decoder_repairs: Counter[str]) -> None:
        for label, count in sorted((decoder_repairs + damage.repairs).items()):
            self.info.notes.append(f"repaired invalid JSON as older Kineto wrote it: {label} ({count:,})")
            self.info.counters["repairs"] = self.info.counters.get("repairs", 0) + count
        self.info.notes.extend(damage.notes)
        if damage.events_skipped or damage.bytes_skipped or damage.truncated:
            self.info.counters["events_skipped"] = damage.events_skipped
            self.info.counters["bytes_skipped"] = damage.bytes_skipped
            self.info.partial = True
            where = f" (first damage at byte {damage.first_offset:,})" if damage.first_offset is not None else ""
            self.info.notes.append(
                f"salvaged: skipped {damage.events_skipped:,} damaged or incomplete events, "
                f"{damage.bytes_skipped:,} bytes{where}"
            )

    def _describe(self, top: dict[str, Any], min_start: int | None) -> None:
        meta = {k: v for k, v in top.items() if k not in METADATA_KEYS_SKIPPED}
        self.info.metadata = meta
        dist = meta.get("distributedInfo")
        rank = dist.get("rank") if isinstance(dist, dict) else None
        self.info.rank = int(rank) if isinstance(rank, (int, float, str)) and str(rank).lstrip("-").isdigit() else None
        base = meta.get("baseTimeNanoseconds")
        if (isinstance(base, int) and base > 0) or (min_start is not None and min_start >= ABSOLUTE_US * 1000):
            self.info.time_base = "unix_epoch"
        else:
            self.info.time_base = "relative"
            if base is not None:
                meta["baseTimeNanoseconds"] = 0


def _stamp(table: pa.Table, info: TraceInfo) -> pa.Table:
    """Fill the per-trace identity columns."""
    for name, arr in identity(table.num_rows, info).items():
        table = table.set_column(table.schema.get_field_index(name), name, arr)
    return table
