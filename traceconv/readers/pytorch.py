"""PyTorch profiler (Kineto Chrome trace JSON, plain or gzip) -> unified tables, in bounded chunks.

Pass 1 decodes chunks of events into unified columns and fills a compact link index; the
chunk tables are kept in memory while small and spilled to a temporary Parquet file
beyond :data:`SPILL_BYTES`. Pass 2 adds the links (launching API call, CPU operator,
thread names) and the absolute time base, batch by batch.
"""

from __future__ import annotations

import gc
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from traceconv.readers.base import Progress, TraceInfo, trace_stem
from traceconv.readers.chunker import CHUNK, Damage, EventChunks
from traceconv.readers.kineto_columns import ChunkContext, build, needs_exact, unpadded_fractions
from traceconv.readers.kineto_decode import Decoded, decode_events
from traceconv.readers.kineto_links import LinkIndex
from traceconv.readers.kineto_repair import RobustDecoder

SPILL_BYTES = 8 << 20
ABSOLUTE_US = 10**15  # microsecond timestamps past this (2001-09) are Unix epoch times
METADATA_KEYS_SKIPPED = ("traceEvents",)


class PytorchReader:
    def __init__(
        self, path: Path, progress: Progress | None = None, chunk_size: int = CHUNK, salvage: bool = False
    ) -> None:
        self.path = Path(path)
        self.info = TraceInfo(path=self.path, source="pytorch", trace_id=trace_stem(self.path))
        self._progress = progress
        self._chunk_size = chunk_size
        self._salvage = salvage
        self._unpadded: bool | None = None
        self._events = 0

    def _strict(self, chunk: bytes) -> Decoded:
        if self._unpadded is None:
            self._unpadded = unpadded_fractions(chunk)
            if self._unpadded:
                self.info.notes.append(
                    "timestamps written without zero-padded decimals (Kineto before 2024-04) "
                    "were read as microseconds + nanoseconds"
                )
        if self._unpadded:
            return decode_events(chunk, True)
        decoded = decode_events(chunk, False)
        return decode_events(chunk, True) if needs_exact(chunk, decoded.events) else decoded

    def tables(self) -> Iterator[pa.Table]:
        size = os.path.getsize(self.path)
        progress = (lambda done: self._progress(done, size)) if self._progress else None  # type: ignore[misc]
        chunks: EventChunks
        robust = RobustDecoder(self._strict, Damage(), self._salvage)

        def decode(chunk: bytes) -> Decoded:
            robust.chunk_offset = chunks.offset
            return robust(chunk)

        chunks = EventChunks(self.path, decode, progress, self._chunk_size, self._salvage)
        robust.damage = chunks.damage
        index = LinkIndex()
        spill, op_spill = _Spill(), _Spill()
        was_enabled = gc.isenabled()
        gc.disable()  # pass 1 allocates millions of short-lived objects without cycles
        try:
            for decoded in chunks:
                table = build(
                    decoded, ChunkContext(self._events, decoded.exact, bool(self._unpadded), chunks.damage.repairs)
                )
                del decoded
                self._events += table.num_rows
                ops = index.add(table)
                if ops is not None:
                    op_spill.append(ops)
                spill.append(table)
        finally:
            if was_enabled:
                gc.enable()
        self._record_damage(chunks.damage, robust)
        self._describe(chunks.document.top, spill.min_start)
        try:
            index.finalize(op_spill)
        finally:
            op_spill.close()
        base = int(self.info.metadata.get("baseTimeNanoseconds") or 0)
        try:
            for table in spill:
                yield _stamp(index.resolve(table, base), self.info)
        finally:
            spill.close()
        self.info.counters["events"] = self._events

    def _record_damage(self, damage: Damage, robust: RobustDecoder) -> None:
        for label, count in sorted((robust.repairs + damage.repairs).items()):
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
    n = table.num_rows
    ident = {
        "source": pa.DictionaryArray.from_arrays(pa.array([0] * n, pa.int32()), pa.array([info.source])),
        "trace_id": pa.DictionaryArray.from_arrays(pa.array([0] * n, pa.int32()), pa.array([info.trace_id])),
        "rank": pa.array([info.rank] * n, pa.int32()),
    }
    for name, arr in ident.items():
        table = table.set_column(table.schema.get_field_index(name), name, arr)
    return table


class _Spill:
    """Pass-1 tables: in memory while small, then in a temporary Arrow IPC stream (read back batch by batch)."""

    def __init__(self) -> None:
        self._tables: list[pa.Table] = []
        self._bytes = 0
        self._sink: Any = None
        self._writer: Any = None
        self._path: str | None = None
        self.min_start: int | None = None

    def append(self, table: pa.Table) -> None:
        if "start_ns" in table.column_names:
            start = pc.min(table["start_ns"]).as_py()
            if start is not None:
                self.min_start = start if self.min_start is None else min(self.min_start, start)
        if self._writer is None and self._bytes + table.nbytes <= SPILL_BYTES:
            self._tables.append(table)
            self._bytes += table.nbytes
            return
        if self._writer is None:
            fd, self._path = tempfile.mkstemp(prefix="traceconv-", suffix=".arrows")
            os.close(fd)
            self._sink = pa.OSFile(self._path, "wb")
            self._writer = pa.ipc.new_stream(self._sink, table.schema)
            for held in self._tables:
                self._writer.write_table(held)
            self._tables = []
        self._writer.write_table(table)

    def __iter__(self) -> Iterator[pa.Table]:
        if self._writer is None:
            while self._tables:
                yield self._tables.pop(0)
            return
        self._writer.close()
        self._sink.close()
        assert self._path is not None
        with pa.OSFile(self._path, "rb") as source:
            for batch in pa.ipc.open_stream(source):
                yield pa.Table.from_batches([batch])

    def close(self) -> None:
        self._tables = []
        if self._path and os.path.exists(self._path):
            os.unlink(self._path)
