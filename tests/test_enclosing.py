"""The one innermost-enclosing mechanism (readers.enclosing), against brute force, and its uses."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from traceconv.analyses.intervals import parents
from traceconv.readers.enclosing import Innermost, Points, innermost_enclosing

ranges = st.lists(st.tuples(st.integers(-1, 3), st.integers(0, 60), st.integers(0, 25)), max_size=40)
queries = st.lists(st.tuples(st.integers(-1, 3), st.integers(-5, 90)), max_size=40)


def _brute_enclosing(rs: list[tuple[int, int, int]], qs: list[tuple[int, int]]) -> list[int]:
    """The innermost range (latest start, then earliest end, then the later one) containing each point."""
    out = []
    for g, t in qs:
        best = -1
        for i, (rg, s, d) in enumerate(rs):
            if g < 0 or rg != g or not s <= t <= s + d:
                continue
            if best < 0 or (s, -(s + d), i) >= (rs[best][1], -(rs[best][1] + rs[best][2]), best):
                best = i
        out.append(best)
    return out


@settings(max_examples=300, deadline=None, derandomize=True)
@given(ranges, queries)
def test_innermost_enclosing_is_the_latest_starting_shortest_range_around_each_point(
    rs: list[tuple[int, int, int]], qs: list[tuple[int, int]]
) -> None:
    group = np.array([r[0] for r in rs], dtype=np.int64)
    start = np.array([r[1] for r in rs], dtype=np.int64)
    end = start + np.array([r[2] for r in rs], dtype=np.int64)
    got = innermost_enclosing(
        group, start, end, np.array([q[0] for q in qs], np.int64), np.array([q[1] for q in qs], np.int64)
    )
    assert got.tolist() == _brute_enclosing(rs, qs)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(ranges, queries, st.integers(1, 5))
def test_ranges_offered_in_batches_give_one_offers_answer(
    rs: list[tuple[int, int, int]], qs: list[tuple[int, int]], batches: int
) -> None:
    """The PyTorch reader streams operators in chunks: a tie goes to the first chunk, else the same."""
    rs = [r for r in rs if r[0] >= 0]
    group = np.array([q[0] for q in qs], np.int64)
    points = Points(np.where(group >= 0, group, -1), np.array([q[1] for q in qs], np.int64))
    whole, parts = Innermost(len(qs), [np.int64]), Innermost(len(qs), [np.int64])
    g = np.array([r[0] for r in rs], np.int64)
    s = np.array([r[1] for r in rs], np.int64)
    e = s + np.array([r[2] for r in rs], np.int64)
    ids = np.arange(len(rs), dtype=np.int64)
    whole.offer(points, *points.covered(g, s, e), s, e, [ids])
    for chunk in np.array_split(np.arange(len(rs)), batches):
        parts.offer(points, *points.covered(g[chunk], s[chunk], e[chunk]), s[chunk], e[chunk], [ids[chunk]])
    same = (whole.start == parts.start) & (whole.end == parts.end)
    assert same.all()  # the same range, or one equal to it
    assert ((whole.values[0] >= 0) == (parts.values[0] >= 0)).all()


def test_times_too_far_apart_to_pack_are_ranked_instead() -> None:
    """Hand-made: group x span past 2**62 (epoch nanoseconds in many groups) still finds the same ranges."""
    far = 2**61
    group = np.array([0, 5, 5], np.int64)
    start, end = np.array([0, far, far + 10], np.int64), np.array([far, far + 100, far + 20], np.int64)
    got = innermost_enclosing(
        group, start, end, np.array([0, 5, 5, 5], np.int64), np.array([far, far + 15, far + 50, 3], np.int64)
    )
    assert got.tolist() == [0, 2, 1, -1]


def _brute_parents(g: list[int], s: list[int], e: list[int]) -> list[int]:
    """Sorted by (group, start, longest first): the innermost earlier range still open at a range's start."""
    n = len(s)
    order = sorted(range(n), key=lambda i: (g[i], s[i], -e[i], i))
    rank = {i: k for k, i in enumerate(order)}
    out = [-1] * n
    for b in range(n):
        best = -1
        for a in range(n):
            if g[a] != g[b] or rank[a] >= rank[b]:
                continue
            s2a, e2a, s2b = 2 * s[a], max(2 * e[a], 2 * s[a] + 1), 2 * s[b]
            if not s2a <= s2b < e2a:
                continue
            if best < 0 or (s[a], -e[a], rank[a]) > (s[best], -e[best], rank[best]):
                best = a
        out[b] = best
    return out


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 40), st.integers(0, 15)), max_size=30))
def test_parents_are_the_innermost_open_range(rs: list[tuple[int, int, int]]) -> None:
    g = [r[0] for r in rs]
    s = [r[1] for r in rs]
    e = [r[1] + r[2] for r in rs]
    got = parents(np.array(g, np.int64), np.array(s, np.int64), np.array(e, np.int64))
    assert got.tolist() == _brute_parents(g, s, e)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 40), st.integers(0, 15)), max_size=30))
def test_parents_of_ranges_given_in_order(rs: list[tuple[int, int, int]]) -> None:
    """Ranges already in (group, start, longest first) order, ties included, as the trees' pass
    gives them (parents then keeps their order instead of sorting them)."""
    rs = sorted(rs, key=lambda r: (r[0], r[1], -r[2]))
    g = [r[0] for r in rs]
    s = [r[1] for r in rs]
    e = [r[1] + r[2] for r in rs]
    got = parents(np.array(g, np.int64), np.array(s, np.int64), np.array(e, np.int64))
    assert got.tolist() == _brute_parents(g, s, e)


def test_a_range_overlapping_its_neighbour_gets_the_range_that_holds_it() -> None:
    """Hand-made (rounded timestamps make such overlaps): D lies in C, which starts inside B and
    ends after A; D's parent is C (the range open at its start), not none."""
    g = np.zeros(4, np.int64)
    start, end = np.array([0, 4, 6, 22], np.int64), np.array([20, 8, 24, 23], np.int64)
    assert parents(g, start, end).tolist() == [-1, 0, 1, 2]
