"""Kineto times -> exact int64 nanoseconds.

Kineto writes microseconds, with three decimals since 2022 (the nanoseconds). A float64 holds
those exactly below 2**43 us (relative times); absolute (Unix epoch) times, or a monotonic
clock of a host up more than ~101 days, need the number's text: :func:`needs_exact` tells
which chunks, and :func:`times_ns` reads either form. Kineto before 2024-04 printed the
nanoseconds without zero padding (``1.5`` for 1 us + 5 ns): :func:`unpadded_fractions`.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traceconv.readers.arrow_util import positions, raw_texts, spread
from traceconv.readers.pytorch.decode import exact_number

_TS_EXACT = re.compile(rb'"ts"\s*:\s*-?(?:\d{14,}|9\d{12}|8[7-9]\d{11})\.')


FLOAT_EXACT_US = 2.0**43  # below this, a float64 holds microseconds to well under half a nanosecond


def needs_exact(chunk: bytes, events: list[Any]) -> bool:
    """Absolute microseconds with decimals lose nanoseconds in a float64: decode those exactly.

    Decided from the float decode: only timestamps past 2**43 us can be inexact, and only
    when written with decimals; the text tells, for the chunks that have such timestamps.
    """
    # A trace's timestamps are all absolute or all relative: every 16th event tells the scale.
    if not any(_magnitude(e.ts) >= FLOAT_EXACT_US for e in events[::16]):
        return False
    return _TS_EXACT.search(chunk) is not None


def _magnitude(ts: Any) -> float:
    """abs(ts) as the float decode reads it, from either decode (the same double: both round correctly)."""
    if isinstance(ts, msgspec.Raw):
        value = _as_decimal(ts)
        return abs(float(value)) if value is not None else 0.0
    return abs(ts) if ts is not None else 0.0


def unpadded_fractions(sample: bytes) -> bool:
    """Kineto before 2024-04 printed ``ts`` as ``{us}.{ns % 1000}`` without zero padding.

    Such a writer produces fractions shorter than three digits *and* fractions that end in
    0 (``.45``, ``.450``); a padded writer never writes short ones, a float printer never
    writes a trailing zero.
    """
    fracs = re.findall(rb'"(?:ts|dur)"\s*:\s*-?\d+\.(\d+)', sample[: 4 << 20])
    short = sum(1 for f in fracs if len(f) < 3)
    trailing_zero = any(len(f) >= 2 and f.endswith(b"0") for f in fracs)
    # ns % 1000 < 100 for ~10% of values: a stray short value in a padded file is not the signal
    return short >= max(2, 0.03 * len(fracs)) and trailing_zero


def times_ns(values: list[Any], exact: bool, unpadded: bool) -> pa.Array:
    """Microseconds as written -> exact int64 nanoseconds (null where absent)."""
    if not exact:
        try:  # floats and None as decoded: converted at C speed (nulls become NaN)
            arr = pa.array(values, pa.float64()).to_numpy(zero_copy_only=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError):  # other numbers from the repair paths
            arr = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
        valid = np.isfinite(arr)
        whole = np.floor(np.where(valid, arr, 0.0))
        ns = whole.astype(np.int64) * 1000 + np.rint((np.where(valid, arr, 0.0) - whole) * 1000).astype(np.int64)
        return pa.array(ns, mask=~valid)
    return _text_ns(values, unpadded)


# A time as Kineto writes it: integer microseconds and up to three decimals (nanoseconds).
_TIME_TEXT = r"^(?P<neg>-?)(?P<us>\d{1,16})(?:\.(?P<ns>\d{1,3}))?$"
_MAX_US = (2**63 - 1) // 1000 - 1  # nanoseconds of larger values do not fit an int64
_DECIMAL_US = pa.decimal128(22, 3)  # microseconds with up to three decimals (the nanoseconds)
_NS_PER_US = pa.scalar(1000, pa.decimal128(4, 0))


def _text_ns(values: list[Any], unpadded: bool) -> pa.Array:
    """Exact nanoseconds from the times' text, at C speed for the usual forms (``123``,
    ``-1.5``, ``1712195495519689.047``); anything else (exponents, strings, more decimals)
    value by value through Decimal."""
    try:  # as decoded: every value a msgspec.Raw, joined without a Python object per value
        texts = raw_texts(values)
    except TypeError:  # from the repair paths: Decimal, float or None values among them
        texts = pa.array([_time_text(v) for v in values], pa.binary())
    try:
        strings = texts.cast(pa.string())
    except pa.ArrowInvalid:  # not UTF-8 (a string value): every value the slow way
        return pa.array([_decimal_ns(_as_decimal(v), unpadded) for v in values], type=pa.int64())
    if not unpadded:
        try:  # the usual forms, parsed as decimals by Arrow: twice as fast as the regex below
            return pc.cast(pc.multiply(strings.cast(_DECIMAL_US), _NS_PER_US), pa.int64())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass  # more than three decimals, text, `null`, past int64: value by value below
    parts = pc.extract_regex(strings, _TIME_TEXT)
    us = pc.struct_field(parts, "us").cast(pa.int64())
    frac = pc.struct_field(parts, "ns")
    frac = pc.if_else(pc.equal(frac, ""), "0", frac) if unpadded else pc.utf8_rpad(frac, 3, "0")
    magnitude = pc.add(pc.multiply(us, 1000), frac.cast(pa.int64()))
    ns = pc.if_else(pc.equal(pc.struct_field(parts, "neg"), "-"), pc.negate(magnitude), magnitude)
    fast = pc.and_(pc.is_valid(parts), pc.less_equal(us, _MAX_US)).fill_null(False)
    slow_rows = pc.and_(pc.invert(fast), pc.is_valid(texts))  # "null" text is valid: Decimal says None
    slow = np.flatnonzero(np.asarray(slow_rows))
    if len(slow) == 0:
        return ns
    fixed = pa.array([_decimal_ns(_as_decimal(values[i]), unpadded) for i in slow], type=pa.int64())
    return pc.if_else(slow_rows, spread(fixed, positions(len(values), slow)), ns)


def _time_text(v: Any) -> bytes | None:
    if isinstance(v, msgspec.Raw):
        text = bytes(v)
        return None if text in (b"", b"null") else text
    if v is None:
        return None
    return repr(v).encode() if isinstance(v, float) else str(v).encode()


def _as_decimal(v: Any) -> Decimal | None:
    if isinstance(v, msgspec.Raw):
        text = bytes(v)
        return None if text in (b"", b"null") else exact_number(text)
    if isinstance(v, float):
        return Decimal(repr(v))
    return v if isinstance(v, Decimal) else None


def _decimal_ns(v: Decimal | None, unpadded: bool) -> int | None:
    """Exact nanoseconds of a time in microseconds; None if absent, not finite or past int64."""
    if v is None or not v.is_finite():
        return None
    value = int(v.scaleb(3).to_integral_value())
    if unpadded:
        sign, digits, exp = v.as_tuple()
        assert isinstance(exp, int)
        if exp < 0:
            text = "".join(map(str, digits)).rjust(-exp + 1, "0")
            value = int(text[:exp]) * 1000 + int(text[exp:])
            value = -value if sign else value
    return value if -(2**63) <= value < 2**63 else None
