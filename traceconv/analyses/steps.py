"""Steps: the ranges that mark one training or inference iteration each, and their time as the
program lived it.

Steps are ranges (CPU operators, annotations, NVTX ranges) whose name matches a pattern
(``ProfilerStep#N``, ``step_N``, ``iterN`` ... by default); the thread that has the most of
them wins, and a step inside another step is not one of its own (:func:`host_steps`).

A step's host range is when the host issued it; its GPU work (the kernels, copies, memsets and
graphs launched inside the range, by any thread of its process) runs later when the host runs
ahead of the GPU. Each step is therefore measured over the window in which the program lived it
(:func:`lived`): it ends when both its host range and its GPU work have ended, and begins where
the step before it ended (the first step: at its host range's start, or, when the GPU was still
busy with earlier work, where that work ended or where its own GPU work began, whichever came
first). The windows tile the steps back to back, so the step time, the median of their lengths,
is the pace at which steps complete: the GPU's when the host runs ahead, the host's when the GPU
waits for it. How far the host ran ahead is the median of each step's GPU end less its host end.

A first step over :data:`WARMUP_FACTOR` times the median of all steps is warm-up (compilation,
allocator growth, cuDNN autotuning) and is left out of the per-step figures, with a note. So are
later steps that long in which the program did what it does once (``one_off_at``: a CUDA graph
captured, Dynamo compiling), when they are at most :data:`ONE_OFF_SHARE` of the steps (one at
least): the per-step figures describe the steady state, and a note names them. Other steps that
far from the median (shorter ones, long ones without such work, as a stalled data pipeline's, or
long ones that recur) are reported as outliers and kept.
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
ONE_OFF_SHARE = 0.1  # long steps left out as one-offs: at most this share of the steps
AHEAD_NOTE_PCT = 10.0  # the host's lead is said in a note from this share of the step time


@dataclass(frozen=True)
class HostSteps:
    """The step ranges of one thread, in time order: where the host issued each step."""

    label: str
    names: list[str]
    start_ns: I.I64
    end_ns: I.I64
    trace_id: str | None = None
    pid: int | None = None
    tid: int | None = None

    @property
    def count(self) -> int:
        return len(self.start_ns)


@dataclass(frozen=True)
class Launched:
    """The GPU work launched inside each host step range: its first start and last end
    (``launched`` False where a step launched none), and the last end of the GPU work the
    process launched before the first step (None: none)."""

    gpu_start_ns: I.I64
    gpu_end_ns: I.I64
    launched: I.Bools
    before_end_ns: int | None = None

    @classmethod
    def none(cls, count: int) -> Launched:
        z = np.zeros(count, np.int64)
        return cls(z, z.copy(), np.zeros(count, np.bool_))


@dataclass(frozen=True)
class Steps:
    """The steps of one thread, in time order, warm-up left out: each as the program lived it
    (``start_ns``, ``end_ns``), its host range (``cpu_*``) and its GPU work (``gpu_*``, where
    ``launched``); ``label``: their name, number as ``*``."""

    label: str
    start_ns: I.I64
    end_ns: I.I64
    cpu_start_ns: I.I64
    cpu_end_ns: I.I64
    gpu_start_ns: I.I64
    gpu_end_ns: I.I64
    launched: I.Bools
    warmup_ns: int | None = None  # the length of the first step when it was left out as warm-up
    one_offs: list[tuple[str, int]] = field(default_factory=list)  # (step name, length) left out as one-offs
    outliers: list[tuple[str, int]] = field(default_factory=list)  # (step name, length) far from the median
    trace_id: str | None = None  # the trace and process of the steps' thread
    pid: int | None = None

    @property
    def count(self) -> int:
        return len(self.start_ns)

    @property
    def median_ns(self) -> int:
        """The step time: the median step, as the program lived it."""
        return round(float(np.median(self.end_ns - self.start_ns)))

    @property
    def cpu_median_ns(self) -> int:
        """The host ranges' median length."""
        return round(float(np.median(self.cpu_end_ns - self.cpu_start_ns)))

    @property
    def host_ahead_ns(self) -> int | None:
        """How far the host ran ahead of its GPU work: the median of each step's GPU end less its
        host end (negative: the GPU's work ended first, it waited for the host); None when no step
        launched GPU work."""
        if not self.launched.any():
            return None
        lead = self.gpu_end_ns[self.launched] - self.cpu_end_ns[self.launched]
        return round(float(np.median(lead)))

    def notes(self) -> list[str]:
        out = []
        if self.warmup_ns is not None:
            out.append(
                f"the first step ({ms(self.warmup_ns)}, over {WARMUP_FACTOR:g}x the median) is warm-up: "
                f"left out of the per-step figures, which cover the other {self.count}"
            )
        if self.one_offs:
            listed = ", ".join(f"{name} {ms(dur)}" for name, dur in self.one_offs)
            out.append(
                f"{listed}: over {WARMUP_FACTOR:g}x the median step, and the program captured a CUDA graph or "
                "compiled in it (a one-off): left out of the per-step figures"
            )
        if self.outliers:
            listed = ", ".join(f"{name} {ms(dur)}" for name, dur in self.outliers[:5])
            more = f" and {len(self.outliers) - 5} more" if len(self.outliers) > 5 else ""
            out.append(f"steps far from the median of {ms(self.median_ns)} (kept): {listed}{more}")
        ahead = self.host_ahead_ns
        if ahead is not None and ahead * 100.0 >= AHEAD_NOTE_PCT * max(self.median_ns, 1):
            out.append(
                f"the host ran ahead of the GPU: each step's GPU work ended a median {ms(ahead)} after its host "
                f"range ({ms(self.cpu_median_ns)} median) ended; the GPU is the limit, and steps are measured "
                f"as the GPU ran them ({ms(self.median_ns)} median)"
            )
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


def host_steps(ranges: pd.DataFrame) -> HostSteps | None:
    """The step ranges among ``ranges`` (a frame of prepare's ranges, with ``is_step`` and
    ``label``; ``trace_id`` optional), of the thread that has the most of them."""
    steps = ranges[ranges["is_step"]]
    if steps.empty:
        return None
    keys = [k for k in ("trace_id", "pid", "tid") if k in steps.columns]
    thread = steps.groupby(keys, dropna=False, observed=True).size().idxmax()
    thread = thread if isinstance(thread, tuple) else (thread,)
    mine = np.ones(len(steps), np.bool_)
    for k, v in zip(keys, thread, strict=True):
        col = steps[k]
        mine &= (col.isna() if pd.isna(v) else (col == v)).to_numpy(dtype=bool, na_value=False)
    on = steps[mine].sort_values("start_ns", kind="stable")
    start, end = _ints(on["start_ns"]), _ints(on["end_ns"])
    reach = np.maximum.accumulate(end)
    outer = np.r_[True, start[1:] >= reach[:-1]]  # a step inside another step is not a step of its own
    labels = on["label"].astype(str).to_numpy()[outer]
    ident = dict(zip(keys, thread, strict=True))
    return HostSteps(
        label=str(pd.Series(labels).mode().iloc[0]),
        names=[str(n) for n in on["name"].astype(str).to_numpy()[outer]],
        start_ns=start[outer],
        end_ns=end[outer],
        trace_id=_opt(ident.get("trace_id"), str),
        pid=_opt(ident.get("pid"), int),
        tid=_opt(ident.get("tid"), int),
    )


def windows(host_start: I.I64, host_end: I.I64, gpu: Launched) -> tuple[I.I64, I.I64]:
    """Each step's window as the program lived it (the module's docstring), from its host range and
    the GPU work it launched."""
    end = np.where(gpu.launched, np.maximum(host_end, gpu.gpu_end_ns), host_end)
    end = np.maximum.accumulate(end)  # a step ends no earlier than the one before it
    start = np.empty_like(end)
    start[1:] = end[:-1]
    start[0] = host_start[0]
    if gpu.launched[0] and gpu.before_end_ns is not None:
        # the GPU was still busy with earlier work: the step began when that ended, or when its own began
        start[0] = max(int(host_start[0]), min(gpu.before_end_ns, int(gpu.gpu_start_ns[0])))
    start[0] = min(start[0], end[0])
    return start, end


def lived(host: HostSteps, gpu: Launched | None = None, one_off_at: I.I64 | None = None) -> Steps:
    """Each step as the program lived it (the module's docstring), warm-up and one-offs left out
    (``one_off_at``: when the program captured a graph or compiled), outliers named."""
    gpu = gpu if gpu is not None else Launched.none(host.count)
    cpu_start, cpu_end = host.start_ns, host.end_ns
    start, end = windows(cpu_start, cpu_end, gpu)
    dur = end - start
    median = float(np.median(dur))
    keep = np.ones(len(dur), np.bool_)
    warmup = None
    if len(dur) > 2 and dur[0] > WARMUP_FACTOR * median:
        warmup, keep[0] = int(dur[0]), False
    names = np.asarray(host.names, dtype=object)
    long = keep & (dur > WARMUP_FACTOR * median)
    if one_off_at is not None and len(one_off_at):  # long steps in which a one-off happened on the host
        marks = np.sort(one_off_at)
        long &= np.searchsorted(marks, cpu_start, "left") < np.searchsorted(marks, cpu_end, "left")
    else:
        long[:] = False
    one_offs = np.zeros(len(dur), np.bool_)
    if len(dur) > 2 and 0 < long.sum() <= max(1, int(len(dur) * ONE_OFF_SHARE)):
        one_offs, keep = long, keep & ~long
    far = keep & ((dur > WARMUP_FACTOR * median) | (dur * WARMUP_FACTOR < median))
    return Steps(
        label=host.label,
        start_ns=start[keep],
        end_ns=end[keep],
        cpu_start_ns=cpu_start[keep],
        cpu_end_ns=cpu_end[keep],
        gpu_start_ns=gpu.gpu_start_ns[keep],
        gpu_end_ns=gpu.gpu_end_ns[keep],
        launched=gpu.launched[keep],
        warmup_ns=warmup,
        one_offs=[(str(n), int(d)) for n, d in zip(names[one_offs], dur[one_offs], strict=True)],
        outliers=[(str(n), int(d)) for n, d in zip(names[far], dur[far], strict=True)],
        trace_id=host.trace_id,
        pid=host.pid,
    )


def find_steps(ranges: pd.DataFrame) -> Steps | None:
    """The steps among ``ranges`` (:func:`host_steps`) by their host ranges alone."""
    host = host_steps(ranges)
    return lived(host) if host is not None else None


def _opt(v: Any, kind: type) -> Any:
    return None if v is None or (isinstance(v, float) and np.isnan(v)) else kind(v)


def _ints(s: pd.Series) -> I.I64:
    return np.asarray(s.to_numpy(dtype=np.int64, na_value=0), dtype=np.int64)
