"""Steps: the ranges that mark one training or inference iteration each, and their statistics.

Steps are ranges (CPU operators, annotations, NVTX ranges) whose name matches a pattern
(``ProfilerStep#N``, ``step_N``, ``iterN`` ... by default); the thread that has the most of
them wins, and a step inside another step is not one of its own. Their time is described by
the median: a first step over :data:`WARMUP_FACTOR` times the median of all steps is warm-up
(compilation, allocator growth, cuDNN autotuning) and is left out of the per-step figures,
with a note; other steps that far from the median are reported as outliers and kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from traceconv.analyses import intervals as I
from traceconv.errors import UsageError
from traceconv.units import ms

STEP_PATTERN = r"^(ProfilerStep#|(train[_ ]?)?step[ _#:-]?|iter(ation)?[ _#:-]?)\d+$"
WARMUP_FACTOR = 3.0


@dataclass(frozen=True)
class Steps:
    """The steps of one thread, in time order, warm-up left out; ``label``: their name, number as ``*``."""

    label: str
    start_ns: I.I64
    end_ns: I.I64
    warmup_ns: int | None = None  # the duration of the first step when it was left out as warm-up
    outliers: list[tuple[str, int]] = field(default_factory=list)  # (step name, duration) far from the median

    @property
    def count(self) -> int:
        return len(self.start_ns)

    @property
    def median_ns(self) -> int:
        return round(float(np.median(self.end_ns - self.start_ns)))

    def notes(self) -> list[str]:
        out = []
        if self.warmup_ns is not None:
            out.append(
                f"the first step ({ms(self.warmup_ns)}, over {WARMUP_FACTOR:g}x the median) is warm-up: "
                f"left out of the per-step figures, which cover the other {self.count}"
            )
        if self.outliers:
            listed = ", ".join(f"{name} {ms(dur)}" for name, dur in self.outliers[:5])
            more = f" and {len(self.outliers) - 5} more" if len(self.outliers) > 5 else ""
            out.append(f"steps far from the median of {ms(self.median_ns)} (kept): {listed}{more}")
        return out


def step_regex(pattern: str) -> re.Pattern[str]:
    """The step names' pattern, compiled; a pattern that does not compile is the user's to mend."""
    try:
        return re.compile(pattern, re.IGNORECASE)
    except re.error as exc:
        raise UsageError(
            None, f"--steps {pattern!r} is not a regular expression ({exc})", r"e.g. --steps '^step_\d+$'"
        ) from exc


def step_label(name: str) -> str:
    return re.sub(r"\d+$", "*", name)


def find_steps(ranges: pd.DataFrame) -> Steps | None:
    """The steps among ``ranges`` (a frame of prepare's ranges, with ``is_step`` and ``label``)."""
    steps = ranges[ranges["is_step"]]
    if steps.empty:
        return None
    thread = steps.groupby(["pid", "tid"], dropna=False, observed=True).size().idxmax()
    on = steps[(steps["pid"].fillna(-1) == _fill(thread[0])) & (steps["tid"].fillna(-1) == _fill(thread[1]))]
    on = on.sort_values("start_ns", kind="stable")
    start, end = _ints(on["start_ns"]), _ints(on["end_ns"])
    reach = np.maximum.accumulate(end)
    outer = np.r_[True, start[1:] >= reach[:-1]]  # a step inside another step is not a step of its own
    labels = on["label"].astype(str).to_numpy()[outer]
    names = on["name"].astype(str).to_numpy()[outer]
    start, end = start[outer], end[outer]
    label = str(pd.Series(labels).mode().iloc[0])
    dur = end - start
    median = float(np.median(dur))
    warmup = None
    if len(dur) > 2 and dur[0] > WARMUP_FACTOR * median:
        warmup, start, end, names, dur = int(dur[0]), start[1:], end[1:], names[1:], dur[1:]
    far = (dur > WARMUP_FACTOR * median) | (dur * WARMUP_FACTOR < median)
    outliers = [(str(n), int(d)) for n, d in zip(names[far], dur[far], strict=True)]
    return Steps(label=label, start_ns=start, end_ns=end, warmup_ns=warmup, outliers=outliers)


def _fill(v: Any) -> int:
    return -1 if pd.isna(v) else int(v)


def _ints(s: pd.Series) -> I.I64:
    return np.asarray(s.to_numpy(dtype=np.int64, na_value=0), dtype=np.int64)
