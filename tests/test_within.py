"""Source.within: the scope test of a time, as SQL comparisons (few windows) or a binary search in
Python (many), gives the same answer at every boundary, for no windows at all, and null for a null time (a
filter drops the row)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from traceconv.analyses import source as SRC


def _answers(starts: list[int], ends: list[int], times: list[int | None], few: int, monkeypatch) -> list[bool]:
    monkeypatch.setattr(SRC, "FEW_WINDOWS", few)
    with SRC.Source(pa.table({"t": pa.array(times, pa.int64())})) as source:
        source.within("inside", np.array(starts, np.int64), np.array(ends, np.int64))
        got = source.arrow("SELECT inside(t) AS hit FROM events_table")["hit"].to_pylist()
    return got


@pytest.mark.parametrize("windows", [([], []), ([10], [20]), ([0, 30, 100], [10, 40, 100])])
def test_macro_and_function_agree(windows, monkeypatch):
    starts, ends = windows
    times = [None, -1, 0, 5, 9, 10, 11, 19, 20, 21, 29, 30, 40, 41, 99, 100, 101]
    expected = [None if t is None else any(a <= t <= b for a, b in zip(starts, ends, strict=True)) for t in times]
    assert _answers(starts, ends, times, few=8, monkeypatch=monkeypatch) == expected  # the macro
    assert _answers(starts, ends, times, few=-1, monkeypatch=monkeypatch) == expected  # the Python function


def test_redefined_across_kinds(monkeypatch):
    """A name defined as a function may be defined again as a macro, and back."""
    with SRC.Source(pa.table({"t": pa.array([5, 50], pa.int64())})) as source:
        monkeypatch.setattr(SRC, "FEW_WINDOWS", -1)
        source.within("inside", np.array([0], np.int64), np.array([10], np.int64))
        monkeypatch.setattr(SRC, "FEW_WINDOWS", 8)
        source.within("inside", np.array([40], np.int64), np.array([60], np.int64))
        assert source.arrow("SELECT inside(t) AS h FROM events_table")["h"].to_pylist() == [False, True]
        monkeypatch.setattr(SRC, "FEW_WINDOWS", -1)
        source.within("inside", np.array([0], np.int64), np.array([10], np.int64))
        assert source.arrow("SELECT inside(t) AS h FROM events_table")["h"].to_pylist() == [True, False]
