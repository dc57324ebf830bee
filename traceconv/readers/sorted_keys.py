"""Id joins shared by the readers: keys sorted once and searched many times."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]


def lookup(keys: I64, values_keys: I64) -> I64:
    """For each of ``keys``, the index into ``values_keys`` holding the same value, or -1.

    ``values_keys`` need not be sorted; when a key occurs more than once the first
    occurrence wins (callers that need uniqueness check it themselves). To look up the
    same values many times, keep a :class:`SortedKeys`.
    """
    return SortedKeys(values_keys).find(keys)


class SortedKeys:
    """Keys sorted once, looked up many times (``lookup`` sorts on every call).

    Keys already in order (event ids, as a trace is read) are kept as they are: no sorted
    copy and no permutation (16 bytes a key less).
    """

    def __init__(self, keys: I64) -> None:
        if len(keys) < 2 or bool(np.all(keys[1:] >= keys[:-1])):
            self._order: npt.NDArray[np.int32] | I64 | None = None
            self._sorted = keys
            return
        order = np.argsort(keys, kind="stable")
        self._sorted = keys[order]
        self._order = order.astype(np.int32) if len(keys) < 2**31 else order

    def find(self, keys: I64) -> I64:
        """Index of the first equal key for each of ``keys``, or -1.

        Keys held in 32 bits are searched with 32-bit probes (a wider probe would make numpy
        convert the whole sorted array on every call); a probe outside their range finds none.
        """
        if len(self._sorted) == 0 or len(keys) == 0:
            return np.full(len(keys), -1, dtype=np.int64)
        fits = None
        if keys.dtype != self._sorted.dtype:
            bounds = np.iinfo(self._sorted.dtype)
            fits = (keys >= bounds.min) & (keys <= bounds.max)
            keys = np.where(fits, keys, 0).astype(self._sorted.dtype)
        pos = np.minimum(np.searchsorted(self._sorted, keys, side="left"), len(self._sorted) - 1)
        at = pos if self._order is None else self._order[pos]
        hit = self._sorted[pos] == keys
        if fits is not None:
            hit &= fits
        return np.where(hit, at, -1).astype(np.int64)
