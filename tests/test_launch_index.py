"""The on-disk index of launching calls gives back every field of the first call with a key, exactly.

Hand-made calls (no export has fields of every span: the index narrows each field of a
segment to the fewest bytes its values' spread needs, and must give back int64 values
whatever that spread is, negative and past 32 bits included).
"""

from __future__ import annotations

import numpy as np

from traceconv.readers.nsys.launches import FIELDS, LaunchIndex


def test_every_field_comes_back_exactly_whatever_its_span() -> None:
    rng = np.random.default_rng(7)
    n = 6000
    corr = np.arange(1, n + 1, dtype=np.int64)
    gpid = np.where(np.arange(n) % 3 == 0, 7 << 24, 9 << 24).astype(np.int64)  # two processes
    index = LaunchIndex(by_process=True)
    try:
        calls = {
            "key": index.keys(corr, gpid, add=True),
            "pos": np.arange(n, dtype=np.int64),  # 16 bits
            "start": rng.integers(-(2**62), 2**62, n),  # a full int64 spread
            "end": 10**12 + rng.integers(0, 2**31, n),  # 32 bits above a large base
            "gtid": np.full(n, (7 << 24) | 1234, dtype=np.int64),  # one value
            "name": rng.integers(0, 200, n),  # 8 bits
            "op_eid": np.where(rng.random(n) < 0.5, -1, rng.integers(0, 60000, n)),  # -1: none
            "op_name": rng.integers(-1, 3, n),
        }
        for a, b in ((0, 2500), (2500, n)):  # two runs
            index.add({f: calls[f][a:b] for f in FIELDS})
        order = rng.permutation(n)
        got = index.find(index.keys(corr[order], gpid[order]))
        for f in FIELDS:
            assert (got[f] == calls[f][order]).all(), f
        absent = index.find(index.keys(np.array([n + 5, 3]), np.array([7 << 24, 5 << 24])))
        assert (absent["pos"] == -1).all()  # a correlation id no call has; a process no call has
        again = {f: calls[f][:1].copy() for f in FIELDS}
        again["pos"][:] = n  # a later call repeating the first one's key
        index.add(again)
        assert index.duplicates == 1
        assert index.find(calls["key"][:1])["pos"].tolist() == [0]  # the first call in event order
    finally:
        index.close()
