"""The first stage of a summary: its scopes, where each figure is measured.

A scope is the whole profiled window, or the steps (:mod:`traceconv.analyses.steps`). Its host
windows say which rows belong to it (GPU work by the start of its launching call); its GPU windows
say where the GPUs' busy and idle time is measured: the steps as the program lived them (host range
and GPU work), or, without steps, each GPU from the start of its first work to the end of its last.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from traceconv.analyses import intervals as I
from traceconv.analyses.prepare import Facts

Segments = tuple[I.I64, I.I64]


@dataclass(frozen=True)
class GpuWindows:
    """The windows (sorted, disjoint segments) a scope's GPUs are measured over: ``default``, or a
    device's own in ``devices``."""

    default: Segments
    devices: dict[str, Segments] = field(default_factory=dict)

    def of(self, device: str) -> Segments:
        return self.devices.get(device, self.default)


@dataclass(frozen=True)
class Scope:
    """Where a scope's rows lie (``start_ns``, ``end_ns``: the host's windows; GPU work by its launch)
    and where its GPUs are measured (``gpu``: the windows the program lived, per device)."""

    name: str  # "window" or "steps"
    start_ns: I.I64
    end_ns: I.I64
    steps: int  # how many steps the scope holds (1 for a window without steps)
    gpu: GpuWindows
    step_ns: int  # the time of one step: the median step (the whole window without steps)
    label: str | None = None  # the steps' name, number as "*"
    each: Segments | None = None  # the steps' windows one by one (their GPU windows, unmerged)

    @property
    def window_ns(self) -> int:
        """The scope's length: the host's window without steps, the steps as lived with them."""
        if self.name != "steps":
            return I.length(self.start_ns, self.end_ns)
        return I.length(*self.gpu.default)


def window_scope(facts: Facts) -> Scope:
    lo, hi = facts.window
    one = (np.array([lo], np.int64), np.array([hi], np.int64))
    spans = {d: (np.array([s], np.int64), np.array([e], np.int64)) for d, (s, e) in facts.gpu_spans.items()}
    # without steps, a "step" is the span of the GPUs' work, where their idle time is measured
    step = max((e - s for s, e in facts.gpu_spans.values()), default=hi - lo)
    return Scope("window", *one, 1, GpuWindows(one, spans), step_ns=step)


def step_scope(facts: Facts) -> Scope | None:
    s = facts.steps
    if s is None:
        return None
    lived = GpuWindows(I.union(s.start_ns, s.end_ns))
    return Scope("steps", s.cpu_start_ns, s.cpu_end_ns, s.count, lived, s.median_ns, s.label, (s.start_ns, s.end_ns))
