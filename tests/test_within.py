"""Source.within: the scope test of a time, as SQL comparisons (few windows) or a join with a table of
the windows per time bucket (many), gives the same answer at every boundary, for no windows at all,
for windows of very different lengths and times before zero, and no row for a null time."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from traceconv.analyses import source as SRC


def _answers(starts: list[int], ends: list[int], times: list[int | None], few: int, monkeypatch) -> list[bool]:
    monkeypatch.setattr(SRC, "FEW_WINDOWS", few)
    with SRC.Source(pa.table({"t": pa.array(times, pa.int64()), "i": range(len(times))})) as source:
        w = source.within("inside", np.array(starts, np.int64), np.array(ends, np.int64))
        hit = f"coalesce({w.test('r.t')}, false) AS hit"
        got = source.arrow(f"SELECT {hit} FROM events_table r{w.join('r.t')} ORDER BY i")
    return [bool(h) for h in got["hit"].to_pylist()]


WINDOWS = [
    ([], []),
    ([10], [20]),
    ([0, 30, 100], [10, 40, 100]),
    ([-50, -3, 0, 30, 100], [-10, -1, 10, 40, 100]),  # before zero: buckets by integer division
    ([0, 11, 12, 13, 10_000], [10, 11, 12, 9_000, 1_000_000]),  # one long window among short ones
]


@pytest.mark.parametrize("windows", WINDOWS)
def test_macro_and_join_agree(windows, monkeypatch):
    starts, ends = windows
    times = [None, -51, -50, -30, -10, -9, -3, -2, -1, 0, 5, 9, 10, 11, 12, 13, 19, 20, 21, 29, 30, 40, 41, 99]
    times += [100, 101, 8_999, 9_000, 9_001, 9_999, 10_000, 500_000, 1_000_000, 1_000_001]
    expected = [t is not None and any(a <= t <= b for a, b in zip(starts, ends, strict=True)) for t in times]
    assert _answers(starts, ends, times, few=8, monkeypatch=monkeypatch) == expected  # the macro
    assert _answers(starts, ends, times, few=-1, monkeypatch=monkeypatch) == expected  # the table


def test_every_time_of_many_windows(monkeypatch):
    """Hundreds of windows of random lengths and gaps: every time from before the first to after the
    last, as a scope of steps has them."""
    rng = np.random.default_rng(7)
    edges = np.cumsum(rng.integers(1, 40, 800))
    starts, ends = edges[0::2], edges[1::2] - 1
    times = list(range(-5, int(edges[-1]) + 5))
    expected = np.zeros(len(times), bool)
    for a, b in zip(starts, ends, strict=True):
        expected[a + 5 : b + 6] = True
    got = _answers(starts.tolist(), ends.tolist(), times, few=-1, monkeypatch=monkeypatch)
    assert got == expected.tolist()


def test_redefined_across_kinds(monkeypatch):
    """A name defined as a table may be defined again as a macro, and back."""
    with SRC.Source(pa.table({"t": pa.array([5, 50], pa.int64())})) as source:

        def hits(w: SRC.Within) -> list[bool]:
            sql = f"SELECT coalesce({w.test('r.t')}, false) AS h FROM events_table r{w.join('r.t')} ORDER BY r.t"
            return source.arrow(sql)["h"].to_pylist()

        monkeypatch.setattr(SRC, "FEW_WINDOWS", -1)
        assert hits(source.within("inside", np.array([0], np.int64), np.array([10], np.int64))) == [True, False]
        monkeypatch.setattr(SRC, "FEW_WINDOWS", 8)
        assert hits(source.within("inside", np.array([40], np.int64), np.array([60], np.int64))) == [False, True]
        monkeypatch.setattr(SRC, "FEW_WINDOWS", -1)
        assert hits(source.within("inside", np.array([0], np.int64), np.array([10], np.int64))) == [True, False]
