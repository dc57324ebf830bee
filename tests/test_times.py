"""Exact times from their JSON text: the vectorised path equals Decimal arithmetic, value for value."""

from __future__ import annotations

from decimal import Decimal

import msgspec
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traceconv.readers.pytorch.reader import PytorchReader
from traceconv.readers.pytorch.times import _as_decimal, _decimal_ns, times_ns

from .conftest import fixture

# Forms seen in real traces and forms that must take the slow path (edge cases no corpus file has).
ODD = [
    b"1712195495519689.047",  # absolute microseconds with nanoseconds (ns_resolution trace)
    b"5127845266863.951",
    b"-1.5",
    b"123",
    b"0.5",
    b"-0.001",
    b"1.05",  # unpadded writers: 1 us + 5 ns
    b"1.5e3",  # exponent: slow path
    b'"77.25"',  # a string holding a number
    b"1.23456",  # more than three decimals: rounded half to even
    b"9999999999999999.999",  # past int64 nanoseconds: null
    b"9223372036854775.807",  # the largest that fits
    b'"abc"',
    b"true",
    b"null",
    b"",
]


def _reference(values: list[object], unpadded: bool) -> list[int | None]:
    return [_decimal_ns(_as_decimal(v), unpadded) for v in values]


# Written out by hand (Decimal arithmetic; unpadded: integer microseconds * 1000 + the decimals as written).
PADDED = [1712195495519689047, 5127845266863951, -1500, 123000, 500, -1, 1050, 1500000, 77250, 1235, None,
          9223372036854775807, None, None, None, None]  # fmt: skip
UNPADDED = [1712195495519689047, 5127845266863951, -1005, 123000, 5, -1, 1005, 1500000, 77025, 24456, None,
            9223372036854775807, None, None, None, None]  # fmt: skip


@pytest.mark.parametrize(("unpadded", "expected"), [(False, PADDED), (True, UNPADDED)])
def test_odd_forms(unpadded: bool, expected: list[int | None]) -> None:
    raws: list[object] = [msgspec.Raw(b) for b in ODD]
    assert times_ns(raws, True, unpadded).to_pylist() == expected  # as decoded: all Raw
    # as the repair paths make them: Decimal, float and None beside Raw
    mixed = [*raws, None, Decimal("5.5"), 3.25]
    tail = [None, 5005, 3025] if unpadded else [None, 5500, 3250]
    assert times_ns(mixed, True, unpadded).to_pylist() == expected + tail


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 5).flatmap(
        lambda places: st.lists(
            st.decimals(min_value=-(10**16), max_value=10**16, allow_nan=False, places=places), max_size=40
        )
    ),
    st.booleans(),
)
def test_any_decimal_text(numbers: list[Decimal], unpadded: bool) -> None:
    values: list[object] = [msgspec.Raw(str(n).encode()) for n in numbers]
    assert times_ns(values, True, unpadded).to_pylist() == _reference(values, unpadded)


def test_absolute_times_read_the_same_in_small_chunks() -> None:
    """Chunks after the first are decoded exactly first (the decoder remembers): same times as one chunk."""
    path = fixture(
        "pytorch/public/facebookresearch__HolisticTraceAnalysis__tests_data_ns_resolution_trace_rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
    )
    whole = pa.concat_tables(PytorchReader(path, workers=0).tables())
    small = pa.concat_tables(PytorchReader(path, chunk_size=16 << 10, workers=0).tables())
    assert whole.num_rows == small.num_rows
    for name in ("start_ns", "end_ns", "dur_ns", "launch_start_ns", "queue_ns"):
        assert whole[name].equals(small[name]), name
    assert 1712195495519689047 in set(small["start_ns"].to_pylist())
