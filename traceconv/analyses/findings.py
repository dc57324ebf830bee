"""Findings: concrete problems with a stable code, the evidence in numbers, and the fix to try.

Each code has one measured ``value`` and one threshold, a field of :class:`Thresholds`
with the same name. A finding is reported when the value reaches its threshold (for
``LOW_OCCUPANCY``: falls below it). Severity is how far past the threshold it is: three
times or more ``high``, one and a half ``medium``, else ``low``; ``PAGEABLE_COPIES`` is
never more than ``low`` (see :data:`MAX_SEVERITY`). Findings are measured on the steps when
the trace marks them, else on the whole profiled window.

Host-blocking syncs are of two kinds (:func:`traceconv.analyses.transfers.staging`): the
host waiting for a GPU result (``SYNC_STALLS``), and the host waiting for a copy from
pageable memory to be staged (``PAGEABLE_COPIES``). A finding about a cost (copies, syncs)
needs that cost to reach ``min_cost_ms`` in its scope and ``min_cost_pct`` of a step (of
the window without steps): a thousand copies of a few bytes are not a problem. Fixes are
phrased for the program the trace comes from (:mod:`traceconv.analyses.fixes`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from traceconv.analyses.fixes import Program, fix, idle_fix, tiny_fix
from traceconv.analyses.measure import ScopeStats
from traceconv.analyses.memory import growth
from traceconv.analyses.metrics import Utilisation
from traceconv.analyses.results import CallTally, MemoryPeak, OpTally
from traceconv.analyses.thresholds import DEFAULTS, Thresholds
from traceconv.names import kernel_label, shorten
from traceconv.units import count, mb, ms, us

CODES = (
    "HOST_DEVICE_COPIES",
    "SYNC_STALLS",
    "PAGEABLE_COPIES",
    "GPU_IDLE",
    "QUEUE_WAIT",
    "LOW_OCCUPANCY",
    "TINY_KERNELS",
    # memory (memory_findings)
    "MEMORY_GROWTH",
    "FRAGMENTATION",
    "LOW_SM_ACTIVITY",
)
# Codes whose value is bad when it is *below* the threshold.
BELOW = frozenset({"LOW_OCCUPANCY", "LOW_SM_ACTIVITY"})
SEVERITIES = ("high", "medium", "low")
HOST_DEVICE = ("HtoD", "DtoH")
# The step still needs its input: pinning removes the staging and the wait, not the copy.
MAX_SEVERITY = {"PAGEABLE_COPIES": "low"}


@dataclass(frozen=True)
class Finding:
    code: str
    severity: str
    message: str
    value: float
    threshold: float

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# What a user would recognise behind the operator that issued a copy or a sync.
OP_HINTS = {
    "aten::_local_scalar_dense": "_local_scalar_dense = .item()",
    "aten::copy_": "copy_ = .to()/.cpu()/copy_",
    "aten::nonzero": "nonzero = nonzero()/mask indexing",
    "cudaDeviceSynchronize": "cudaDeviceSynchronize = torch.cuda.synchronize()",
}


PYTORCH = Program("pytorch", cuda_graphs=False)


def evaluate(
    stats: ScopeStats,
    thresholds: Thresholds = DEFAULTS,
    program: Program = PYTORCH,
    utilisation: Utilisation | None = None,
) -> list[Finding]:
    """The findings of one scope, most severe first; ``utilisation``: its GPU metrics, if any
    (:func:`traceconv.analyses.metrics.scope_means`)."""
    out = [f for check in _CHECKS if (f := check(stats, thresholds, program)) is not None]
    if utilisation and (sm := low_sm_activity(stats, utilisation, thresholds, program)) is not None:
        out.append(sm)
    return ordered(out)


def ordered(findings: Sequence[Finding]) -> list[Finding]:
    """Most severe first, then furthest past its threshold."""
    return sorted(findings, key=lambda f: (SEVERITIES.index(f.severity), -_ratio(f)))


def costly(stats: ScopeStats, cost_ns: float, t: Thresholds) -> bool:
    """Whether a cost (copy time, blocked time) in the scope is worth a finding: at least
    ``min_cost_ms`` in all, and at least ``min_cost_pct`` of a step."""
    step = stats.scope.step_ns
    per_step = cost_ns / max(stats.scope.steps, 1)
    return cost_ns >= t.min_cost_ms * 1e6 and (not step or per_step * 100.0 >= t.min_cost_pct * step)


def _severity(value: float, threshold: float, below: bool = False) -> str:
    ratio = (threshold / value if value else float("inf")) if below else (value / threshold if threshold else 0.0)
    return "high" if ratio >= 3 else "medium" if ratio >= 1.5 else "low"


def _ratio(f: Finding) -> float:
    if f.code in BELOW:
        return f.threshold / f.value if f.value else float("inf")
    return f.value / f.threshold if f.threshold else 0.0


def _make(code: str, value: float, threshold: float, message: str, below: bool = False) -> Finding:
    severity = _severity(value, threshold, below)
    cap = MAX_SEVERITY.get(code, SEVERITIES[0])
    return Finding(code, max(severity, cap, key=SEVERITIES.index), message, round(value, 2), threshold)


make = _make  # for the findings of other analyses (ranks)


def _where(stats: ScopeStats) -> str:
    s = stats.scope
    return f"in {s.steps} steps" if s.name == "steps" else "in the profiled window"


def _causes(items: Sequence[OpTally], program: Program, calls: Sequence[CallTally] = ()) -> str:
    """The operators behind a cost, and (for PyTorch) what in a user's code makes them."""
    parts = "; ".join(f"{o.label} x{o.count}" for o in items)
    if program.framework != "pytorch":
        return parts
    names = [o.name for o in items] + [c.name for c in calls]
    hints = dict.fromkeys(h for name in names if (h := OP_HINTS.get(name)))
    return parts + (f" ({'; '.join(hints)})" if hints else "")


def host_device_copies(stats: ScopeStats, t: Thresholds, program: Program) -> Finding | None:
    parts = [stats.memcpy[k] for k in HOST_DEVICE if k in stats.memcpy]
    dur = sum(p.dur_ns for p in parts)
    if not stats.gpu_time_ns or not parts:
        return None
    value = dur * 100.0 / stats.gpu_time_ns
    if value < t.HOST_DEVICE_COPIES or not costly(stats, dur, t):
        return None
    count, size = sum(p.count for p in parts), sum(p.bytes for p in parts)
    pageable = sum(p.pageable_count for p in parts)
    ops = sorted((o for p in parts for o in p.ops), key=lambda o: -o.dur_ns)
    top = f"; {ops[0].dur_ns * 100 / dur:.0f}% from {_causes(ops[:1], program)}" if ops and dur else ""
    msg = (
        f"{'+'.join(k for k in HOST_DEVICE if k in stats.memcpy)} copies take {value:.1f}% of GPU time "
        f"{_where(stats)}: {ms(dur)}, {mb(size)} in {count} copies ({pageable} pageable){top}. "
        f"Fix: {fix('HOST_DEVICE_COPIES', program)}"
    )
    return _make("HOST_DEVICE_COPIES", value, t.HOST_DEVICE_COPIES, msg)


def sync_stalls(stats: ScopeStats, t: Thresholds, program: Program) -> Finding | None:
    sync, scope = stats.sync.result_waits, stats.scope
    per_step = scope.name == "steps"
    value = sync.count / scope.steps if per_step else float(sync.stalls)
    if value < t.SYNC_STALLS or not sync.count or not costly(stats, sync.dur_ns, t):
        return None
    calls = ", ".join(f"{c.name} x{c.count}" for c in sync.calls[:3])
    causes = _causes(sync.ops[:4], program, sync.calls[:3])
    head = (
        f"{count(value)} host syncs per step wait for a GPU result ({calls}, "
        f"{us(sync.dur_ns / scope.steps)} blocked per step)"
        if per_step
        else f"{sync.stalls} host syncs wait for a GPU result and are followed by more GPU work in the profiled "
        f"window ({calls}, {us(sync.dur_ns)} blocked)"
    )
    msg = f"{head}, from {causes}. Each drains the GPU queue. Fix: {fix('SYNC_STALLS', program)}"
    return _make("SYNC_STALLS", value, t.SYNC_STALLS, msg)


def pageable_copies(stats: ScopeStats, t: Thresholds, program: Program) -> Finding | None:
    staged, scope = stats.sync.staging, stats.scope
    n = scope.steps
    value = staged.count / n
    blocked = staged.copy_call_ns + staged.dur_ns
    if value < t.PAGEABLE_COPIES or not staged.count or not costly(stats, blocked, t):
        return None
    each = " per step" if scope.name == "steps" else ""
    causes = "; ".join(f"{o.label} x{o.count}" for o in staged.ops[:4])
    msg = (
        f"{count(value)} HtoD copies{each} ({mb(staged.bytes / n)}) from pageable memory block the host, "
        f"staged through a pinned buffer: {us(blocked / n)}{each} ({us(staged.copy_call_ns / n)} in the "
        f"copy calls, {us(staged.dur_ns / n)} in the syncs after them, which drain the GPU queue); from "
        f"{causes}. Fix: {fix('PAGEABLE_COPIES', program)}"
    )
    return _make("PAGEABLE_COPIES", value, t.PAGEABLE_COPIES, msg)


def gpu_idle(stats: ScopeStats, t: Thresholds, program: Program) -> Finding | None:
    window = sum(d.window_ns for d in stats.gpu.values())
    if not window:
        return None
    busy = sum(d.busy_ns for d in stats.gpu.values())
    value = (window - busy) * 100.0 / window
    if value < t.GPU_IDLE:
        return None
    ops = stats.ops
    host = ops[ops["kind"] == "cpu_op"] if (ops["kind"] == "cpu_op").any() else ops[ops["name"] != stats.scope.label]
    cpu = host.sort_values("cpu_self_ns", ascending=False).head(3)
    top = ", ".join(f"{r.name} {ms(r.cpu_self_ns)} x{r.calls}" for r in cpu.itertuples()) or "not recorded"
    idle = stats.bound.idle_ns
    shares = {name: getattr(idle, name) for name in IDLE_CAUSES}
    cause = max(shares, key=lambda name: shares[name])
    said = ", ".join(f"{IDLE_CAUSES[name]} {idle.pct(ns):.0f}%" for name, ns in shares.items() if ns)
    msg = (
        f"GPU idle {value:.0f}% of the time {_where(stats)} (busy {ms(busy)} of {ms(window)}), "
        f"{stats.bound.verdict}: of the idle time, {said or 'nothing recorded'}; top host time (self): {top}. "
        f"Fix: {idle_fix(cause, program)}"
    )
    return _make("GPU_IDLE", value, t.GPU_IDLE, msg)


def queue_wait(stats: ScopeStats, t: Thresholds, program: Program) -> Finding | None:
    f = stats.launch
    if f.queue_median_ns is None or f.kernels < t.min_kernels:
        return None
    value = f.queue_median_ns / 1e3
    if value < t.QUEUE_WAIT:
        return None
    top = stats.kernels.iloc[0] if len(stats.kernels) else None
    longest = (
        f"; the longest kernel: {_short(top)} ({ms(top['dur_ns'])}, {top['time_pct']:.0f}%)" if top is not None else ""
    )
    msg = (
        f"kernels wait a median {us(f.queue_median_ns)} between their launch call and their start "
        f"({f.queued} queued): the host runs ahead and the GPU is the bottleneck{longest}. "
        f"Fix: {fix('QUEUE_WAIT', program)}"
    )
    return _make("QUEUE_WAIT", value, t.QUEUE_WAIT, msg)


def low_occupancy(stats: ScopeStats, t: Thresholds, program: Program) -> Finding | None:
    f = stats.launch
    if f.occupancy_pct is None or f.occupancy_kernels < t.min_kernels:
        return None
    value = f.occupancy_pct
    if value >= t.LOW_OCCUPANCY:
        return None
    low = stats.kernels[stats.kernels["occupancy_pct"] < t.LOW_OCCUPANCY].head(2)
    names = ", ".join(f"{_short(r)} {r['occupancy_pct']:.0f}% ({ms(r['dur_ns'])})" for _, r in low.iterrows())
    msg = (
        f"kernels run at {value:.0f}% estimated achieved occupancy (time-weighted over {f.occupancy_kernels} "
        f"kernels){_limited(f.occupancy_limiters)}; the longest below {t.LOW_OCCUPANCY:.0f}%: {names}. "
        f"Fix: {fix('LOW_OCCUPANCY', program)}"
    )
    return _make("LOW_OCCUPANCY", value, t.LOW_OCCUPANCY, msg, below=True)


def _limited(limiters: dict[str, int]) -> str:
    """What limits the occupancy, by the kernels' execution time: ", limited by grid 80%, registers 15%"."""
    total = sum(limiters.values())
    if not total:
        return ""
    said = ", ".join(f"{LIMITERS.get(k, k)} {ns * 100 / total:.0f}%" for k, ns in list(limiters.items())[:3])
    return f", limited by (share of kernel time) {said}"


def tiny_kernels(stats: ScopeStats, t: Thresholds, program: Program) -> Finding | None:
    f = stats.launch
    if f.launched < t.min_kernels:
        return None
    value = f.shorter_than_launch * 100.0 / f.launched
    if value < t.TINY_KERNELS:
        return None
    names = ", ".join(f"{_trim(n)} x{c}" for n, c in f.tiny_names.items())
    msg = (
        f"{value:.0f}% of kernels ({f.shorter_than_launch} of {f.launched}) run shorter than their own "
        f"launch call (median {us(f.tiny_median_ns or 0)} vs {us(f.launch_median_ns or 0)} to launch): "
        f"launch overhead dominates; most frequent: {names}. Fix: {tiny_fix(program)}"
    )
    return _make("TINY_KERNELS", value, t.TINY_KERNELS, msg)


# -- GPU metrics (Nsight Systems --gpu-metrics-devices) ----------------------------------------
LIMITERS = {
    "grid": "too few blocks in the grid for the SMs",
    "registers": "registers per thread",
    "shared_memory": "shared memory per block",
    "block_size": "block size (warp slots)",
    "blocks": "blocks per SM",
}


def low_sm_activity(stats: ScopeStats, u: Utilisation, t: Thresholds, program: Program) -> Finding | None:
    """SMs Active (mean of the samples in the scope) below the threshold while the GPUs run work."""
    active = {d: m["sm_active_pct"] for d, m in u.items() if "sm_active_pct" in m}
    window = sum(d.window_ns for d in stats.gpu.values())
    busy = sum(d.busy_ns for d in stats.gpu.values()) * 100.0 / window if window else 0.0
    if not active or busy < t.sm_busy_pct or stats.launch.kernels < t.min_kernels:
        return None
    device = min(active, key=lambda d: active[d])
    value = active[device]
    if value >= t.LOW_SM_ACTIVITY:
        return None
    m = u[device]
    warps = f", compute warps in flight {m['warps_in_flight_pct']:.0f}%" if "warps_in_flight_pct" in m else ""
    issue = f", SM issue {m['sm_issue_pct']:.0f}%" if "sm_issue_pct" in m else ""
    f = stats.launch
    avg = stats.kernels["dur_ns"].sum() / max(f.kernels, 1)
    msg = (
        f"SMs active {value:.1f}% of the time on GPU {device} {_where(stats)} (GPU metrics{issue}{warps}) while "
        f"the GPU runs work {busy:.0f}% of the time: {f.kernels} kernels of {us(avg)} on average leave most SMs "
        f"without a block. Fix: {fix('LOW_SM_ACTIVITY', program)}"
    )
    return _make("LOW_SM_ACTIVITY", value, t.LOW_SM_ACTIVITY, msg, below=True)


def _short(row: Any) -> str:
    return _trim(kernel_label(str(row["name"])))


def _trim(name: str, width: int = 48) -> str:
    return shorten(kernel_label(name), width)


IDLE_CAUSES = {
    "host_other": "host elsewhere",
    "host_launch": "host launching",
    "host_sync": "host blocked in syncs",
    "queued": "work queued on the GPU",
}
_CHECKS: tuple[Callable[[ScopeStats, Thresholds, Program], Finding | None], ...] = (
    host_device_copies,
    sync_stalls,
    pageable_copies,
    gpu_idle,
    queue_wait,
    low_occupancy,
    tiny_kernels,
)


# -- memory: per device, from traceconv.analyses.memory ----------------------------------------
def memory_findings(
    memory: dict[str, MemoryPeak], t: Thresholds = DEFAULTS, program: Program = PYTORCH
) -> list[Finding]:
    """``MEMORY_GROWTH`` and ``FRAGMENTATION``: at most one of each, for the device furthest past."""
    out = []
    for check in (memory_growth, fragmentation):
        found = [f for dev, peak in memory.items() if dev != "cpu" and (f := check(dev, peak, t, program))]
        if found:
            out.append(max(found, key=_ratio))
    return out


def memory_growth(dev: str, m: MemoryPeak, t: Thresholds, program: Program) -> Finding | None:
    per_step = growth(m.step_end_bytes)
    if per_step is None or per_step / 1e6 < t.MEMORY_GROWTH:
        return None
    ends = m.step_end_bytes
    msg = (
        f"GPU {dev}: allocated memory at the end of each step grows at every one of {len(ends)} steps, "
        f"{mb(per_step)} a step ({mb(ends[0])} -> {mb(ends[-1])}): something keeps tensors across steps, a leak. "
        f"Fix: {fix('MEMORY_GROWTH', program)}"
    )
    return _make("MEMORY_GROWTH", per_step / 1e6, t.MEMORY_GROWTH, msg)


def fragmentation(dev: str, m: MemoryPeak, t: Thresholds, program: Program) -> Finding | None:
    reserved = m.reserved_at_peak_bytes
    if not reserved:
        return None
    free = reserved - m.allocated_peak_bytes
    value = free * 100.0 / reserved
    if value < t.FRAGMENTATION or free / 1e6 < t.min_fragmentation_mb:
        return None
    msg = (
        f"GPU {dev}: at the allocated peak ({mb(m.allocated_peak_bytes)}) the caching allocator holds "
        f"{mb(reserved)}: {value:.0f}% of it ({mb(free)}) reserved but not allocated, cached blocks too "
        f"fragmented to reuse. Fix: {fix('FRAGMENTATION', program)}"
    )
    return _make("FRAGMENTATION", value, t.FRAGMENTATION, msg)
