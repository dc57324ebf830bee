"""The operators of several chunks fed to the resolver at once give what feeding them chunk by
chunk gives: the same operator for every API call and GPU row, ties included."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from traceconv.readers.pytorch import links as L
from traceconv.readers.pytorch.reader import PytorchReader

from .conftest import param_path, real_files
from .fixtures import sweep_chunk

SMALL = 32 << 10
TRACES = [p for p in real_files("pytorch", ("*.json", "*.json.gz")) if param_path(p).stat().st_size > 4 * SMALL]


def _linked(
    path: Path, feed_rows: list[int], monkeypatch: pytest.MonkeyPatch, threads: int = 1
) -> tuple[list[L.LinkIndex], int]:
    """Pass 1 once; its link index finalized at each of ``feed_rows`` (a copy each), its lookups on
    ``threads`` threads."""
    reader = PytorchReader(path, chunk_size=sweep_chunk(path, SMALL), workers=0)
    index, spill, op_spill, _ = reader._pass1(None)
    done = []
    try:
        tables = list(op_spill)
        state = pickle.dumps(index)
        for rows in feed_rows:
            monkeypatch.setattr(L, "FEED_ROWS", rows)
            copy = pickle.loads(state)
            copy.finalize(iter(tables), reader._events, threads)
            done.append(copy)
    finally:
        spill.close()
        op_spill.close()
    return done, len(tables)


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name[:60])
def test_batches_of_chunks_link_as_chunk_by_chunk(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (one, whole), chunks = _linked(path, [1, 1 << 40], monkeypatch)  # every chunk alone; all in one batch
    if chunks < 2:
        pytest.skip("one chunk of operators")
    for field in ("op_eid", "op_name"):
        assert np.array_equal(one.api[field], whole.api[field]), field
        assert np.array_equal(one.gpu[field], whole.gpu[field]), field
    assert pickle.dumps(one.api) == pickle.dumps(whole.api)


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name[:60])
def test_lookups_made_ahead_on_threads_link_as_on_one(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches looked up on several threads, ahead of the one applied, link as one thread does."""
    (one,), chunks = _linked(path, [1], monkeypatch)
    (threaded,), _ = _linked(path, [1], monkeypatch, threads=3)
    if chunks < 2:
        pytest.skip("one chunk of operators")
    assert pickle.dumps(one.api) == pickle.dumps(threaded.api)
    assert pickle.dumps(one.gpu) == pickle.dumps(threaded.gpu)


def _resolve(batches: list[dict[str, np.ndarray]], threads: int = 0) -> tuple[list[int], list[int], list[int]]:
    """The operators the calls and the GPU row get, the batches fed one by one (``threads``: looked
    up on that many threads ahead, as the link index does)."""

    def ints(*values: int) -> np.ndarray:
        return np.array(values, dtype=np.int64)

    # two calls on one thread, whose External id (7) two operators name; a GPU row names it too
    api = {"event_id": ints(10, 11), "corr": ints(5, 6), "ext": ints(7, 7), "pid": ints(1, 1), "tid": ints(1, 1)}
    api |= {"start": ints(100, 200), "end": ints(110, 210), "name": ints(0, 0)}
    gpu = {"event_id": ints(20), "corr": ints(99), "ext": ints(7)}
    resolver = L.OperatorResolver(api, gpu, 100)
    try:
        if threads:
            for ops, found in L._looked_up(resolver, iter(batches), threads):
                resolver.apply(ops, found)
        else:
            for ops in batches:
                resolver.feed(ops)
        eid, _ = resolver.api_result()
    finally:
        resolver.annotations.close()
    return eid.tolist(), resolver.gpu_ext_eid.tolist(), resolver.gpu_ext_name.tolist()


def test_an_external_id_named_by_operators_of_two_chunks() -> None:
    """Hand-made (no real trace has one External id on several enclosing operators): the first
    chunk's operators win, and within a chunk the later one, whether fed alone or together."""

    def chunk(event_ids: list[int], name: int) -> dict[str, np.ndarray]:
        n = len(event_ids)
        ops = {"event_id": np.array(event_ids), "ext": np.full(n, 7), "pid": np.ones(n, np.int64)}
        ops |= {"tid": np.ones(n, np.int64), "start": np.full(n, 50), "end": np.full(n, 300)}
        return ops | {"name": np.full(n, name), "is_cpu": np.ones(n, np.int64)}

    first, second = chunk([1, 2], 3), chunk([4], 5)
    alone = _resolve([first, second])
    together = {f: np.concatenate([first[f], second[f]]) for f in first}
    together["chunk"] = np.array([0, 0, 1])
    assert _resolve([together]) == alone == ([2, 2], [2], [3])
    assert _resolve([first, second, chunk([6], 7)], threads=2) == alone  # looked up ahead, applied in order
