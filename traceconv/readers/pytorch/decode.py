"""Decode chunks of Kineto events into typed structures (no per-event dicts).

Two decodes of the same bytes: one for the event fields (``args`` kept as raw JSON text,
so that every argument survives), one for the few arguments that have columns. Both skip
what they do not need at C speed. When a chunk does not fit the types (a string where a
number should be, an integer past 64 bits) it is decoded generically and coerced.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Union

import msgspec

from traceconv.readers.pytorch.damage import ChunkDecodeError

Num = Union[int, float, None]
Id = Union[int, str, float, None]


class Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: Union[str, None] = None
    name: Union[str, None] = None
    pid: Id = None
    tid: Id = None
    ts: Union[float, None] = None
    dur: Union[float, None] = None
    id: Id = None
    args: msgspec.Raw = msgspec.Raw(b"")


class ExactEvent(msgspec.Struct, gc=False):
    """Same as :class:`Event` with the times as written (the JSON text of the number), for
    absolute microseconds with decimals, which a float64 cannot hold to the nanosecond.

    ``ts``/``dur`` are :class:`msgspec.Raw` as decoded; events made by the repair paths may
    hold a ``Decimal``, a ``float`` or ``None`` there (``kineto_columns.times_ns`` takes all).
    """

    ph: str = ""
    cat: Union[str, None] = None
    name: Union[str, None] = None
    pid: Id = None
    tid: Id = None
    ts: msgspec.Raw = msgspec.Raw(b"")
    dur: msgspec.Raw = msgspec.Raw(b"")
    id: Id = None
    args: msgspec.Raw = msgspec.Raw(b"")


class GpuArgs(
    msgspec.Struct,
    gc=False,
    rename={
        "registers": "registers per thread",
        "shared_memory": "shared memory",
        "blocks_per_sm": "blocks per SM",
        "warps_per_sm": "warps per SM",
        "occupancy": "est. achieved occupancy %",
        "theoretical_occupancy": "theoretical occupancy %",
        "bandwidth": "memory bandwidth (GB/s)",
        "from_device": "fromDevice",
        "to_device": "toDevice",
    },
):
    """The arguments of kernels, copies and sets that have columns of their own."""

    device: Num = None
    stream: Num = None
    context: Num = None
    grid: Union[list[Num], None] = None
    block: Union[list[Num], None] = None
    registers: Num = None
    shared_memory: Num = None
    blocks_per_sm: Union[float, int, str, None] = None
    warps_per_sm: Union[float, int, str, None] = None
    occupancy: Union[float, int, str, None] = None
    theoretical_occupancy: Union[float, int, str, None] = None
    bytes: Num = None
    bandwidth: Union[float, int, str, None] = None
    from_device: Num = None
    to_device: Num = None


class MemoryArgs(
    msgspec.Struct,
    gc=False,
    rename={
        "bytes": "Bytes",
        "total_allocated": "Total Allocated",
        "total_reserved": "Total Reserved",
        "device_id": "Device Id",
    },
):
    """The arguments of allocator events (``[memory]``) that have columns of their own.

    A struct per kind of event: decoding fills only the fields that kind uses (a third of a
    trace with memory events is memory events)."""

    bytes: Num = None
    total_allocated: Num = None
    total_reserved: Num = None
    device_id: Num = None


class _ArgsDecoder:
    """Decoders for one struct of arguments: many at once, one at a time, or coerced from JSON."""

    def __init__(self, cls: type[GpuArgs] | type[MemoryArgs]) -> None:
        self.cls = cls
        self.many = msgspec.json.Decoder(list[Union[cls, None]])  # type: ignore[valid-type]
        self.one = msgspec.json.Decoder(Union[cls, None])
        self.keys: tuple[str, ...] = cls.__struct_encode_fields__


_ARGS = {cls: _ArgsDecoder(cls) for cls in (GpuArgs, MemoryArgs)}


_EVENTS = msgspec.json.Decoder(list[Event])
_EXACT = msgspec.json.Decoder(list[ExactEvent])
_ANY = msgspec.json.Decoder()


def _wrap(chunk: bytes) -> bytes:
    return b"[" + chunk + b"]"


def _position(exc: msgspec.DecodeError) -> int | None:
    text = str(exc)
    if "(byte " in text:
        try:
            return int(text.rsplit("(byte ", 1)[1].rstrip(")"))
        except ValueError:
            return None
    return None


@dataclass
class Decoded:
    """One chunk's events, and whether their times were decoded exactly."""

    events: list[Any]
    exact: bool

    def __len__(self) -> int:
        return len(self.events)

    def typed_args(self, idx: Sequence[int], cls: type[GpuArgs] | type[MemoryArgs]) -> list[Any]:
        """The arguments with columns of their own (a ``cls`` or None each), for the events at ``idx`` only."""
        events = self.events
        raws = [events[i].args or b"null" for i in idx]  # msgspec.Raw joins as it is, no copy
        decoder = _ARGS[cls]
        try:
            return decoder.many.decode(b"[" + b",".join(raws) + b"]")
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
            return [_one_args(bytes(raw), decoder) for raw in raws]

    @staticmethod
    def concat(parts: list[Decoded]) -> Decoded:
        exact = any(p.exact for p in parts)
        events: list[Any] = []
        for p in parts:
            if exact and not p.exact:  # one time representation per chunk
                events += [ExactEvent(**{f: getattr(e, f) for f in e.__struct_fields__}) for e in p.events]
            else:
                events += p.events
        return Decoded(events, exact)


def _one_args(raw: bytes, decoder: _ArgsDecoder) -> Any:
    try:
        return decoder.one.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        try:
            return _coerce_args(json.loads(raw), decoder)
        except (ValueError, RecursionError):
            return None


def decode_events(chunk: bytes, exact: bool) -> Decoded:
    """The events of one chunk (raises :class:`ChunkDecodeError`)."""
    data = _wrap(chunk)
    try:
        try:
            return Decoded((_EXACT if exact else _EVENTS).decode(data), exact)
        except msgspec.ValidationError:
            return Decoded(_generic(data, exact), exact)
    except msgspec.DecodeError as exc:
        text = str(exc)
        # No position: msgspec only omits it for truncation (a bad cut) and invalid UTF-8.
        pos = _position(exc) if "UTF-8" not in text else 1
        raise ChunkDecodeError(pos, text) from None
    except RecursionError:
        raise ChunkDecodeError(1, "values nested too deeply") from None


class _RawArgs(msgspec.Struct, gc=False):
    args: msgspec.Raw = msgspec.Raw(b"")


_RAWS = msgspec.json.Decoder(list[msgspec.Raw])
_RAW_ARGS = msgspec.json.Decoder(_RawArgs)


def _generic(data: bytes, exact: bool) -> list[Any]:
    """Slow path for chunks whose values do not fit the types: event by event, coercing only misfits."""
    fast = msgspec.json.Decoder(ExactEvent if exact else Event)
    events: list[Any] = []
    for raw in _RAWS.decode(data):
        try:
            events.append(fast.decode(raw))
        except msgspec.ValidationError:
            events.append(_coerce_event(raw, exact))
    return events


def _coerce_event(raw: msgspec.Raw, exact: bool) -> Any:
    obj = json.loads(bytes(raw), parse_float=Decimal)
    if not isinstance(obj, dict):
        obj = {}
    cls = ExactEvent if exact else Event
    raw_args = _RAW_ARGS.decode(raw).args if obj else msgspec.Raw(b"")
    return cls(
        ph=_text(obj.get("ph")) or "",
        cat=_text(obj.get("cat")),
        name=_text(obj.get("name")),
        pid=_ident(obj.get("pid")),
        tid=_ident(obj.get("tid")),
        ts=_number(obj.get("ts"), exact),
        dur=_number(obj.get("dur"), exact),
        id=_ident(obj.get("id")),
        args=raw_args,
    )


_DECIMAL = msgspec.json.Decoder(Union[Decimal, None])


def exact_number(raw: bytes) -> Decimal | None:
    """A time's JSON text as a Decimal (a number, or a string of one); None if it is neither."""
    try:
        return _DECIMAL.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError):
        try:
            value = _number(json.loads(raw, parse_float=Decimal), True)
        except (ValueError, RecursionError):
            return None
        return value if isinstance(value, Decimal) else None


def _coerce_args(value: Any, decoder: _ArgsDecoder) -> Any:
    if not isinstance(value, dict):
        return None
    cls = decoder.cls
    fields = {key: _scalar(value[key]) for key in decoder.keys if key in value}
    try:
        return msgspec.convert(fields, cls, strict=False)
    except msgspec.ValidationError:
        pass
    good = {}
    for key, v in fields.items():  # keep every field that fits; the rest stays in the args text
        try:
            msgspec.convert({key: v}, cls, strict=False)
            good[key] = v
        except msgspec.ValidationError:
            continue
    return msgspec.convert(good, cls, strict=False)


def _scalar(v: Any) -> Any:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int) and not -(2**63) <= v < 2**63:
        return None  # past int64: kept in the args text only
    if isinstance(v, list):
        return [_scalar(x) if isinstance(x, (int, float)) else None for x in v]
    if isinstance(v, Decimal):
        return float(v)
    return v


def _text(v: Any) -> str | None:
    if v is None or isinstance(v, str):
        return v
    return str(v)


def _ident(v: Any) -> Any:
    if isinstance(v, bool) or v is None:
        return None if v is None else int(v)
    if isinstance(v, int):
        return v if -(2**63) <= v < 2**63 else str(v)
    if isinstance(v, str):
        return v
    if isinstance(v, Decimal):
        return int(v) if v == v.to_integral_value() and abs(v) < 2**63 else str(v)
    return str(v)


def _number(v: Any, exact: bool) -> Any:
    if isinstance(v, str):
        try:
            return Decimal(v) if exact else float(v)
        except (ArithmeticError, ValueError):
            return None
    if isinstance(v, bool) or not isinstance(v, (int, float, Decimal)):
        return None
    if exact:
        return v if isinstance(v, Decimal) else Decimal(v)
    return float(v)


__all__ = ["Decoded", "Event", "ExactEvent", "GpuArgs", "MemoryArgs", "decode_events", "exact_number"]
