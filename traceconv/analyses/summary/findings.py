"""Findings: concrete problems with a stable code, the evidence in numbers, the fix to try, and
what the fix would win.

Each code has one measured ``value`` and one threshold, a field of :class:`Thresholds` with the
same name; a finding is reported when the value reaches its threshold (``LOW_OCCUPANCY``,
``LOW_SM_ACTIVITY``: falls below it). A finding about time carries ``saving_ns``, what fixing it
would win per step (estimated; per GPU where there are several), and ``saving_pct``, that share of
the step time, and its severity comes from it: ``high`` from :data:`HIGH_PCT` % of the step,
``medium`` from :data:`MEDIUM_PCT` %, else ``low``; it must win at least ``min_cost_pct`` of a step
and ``min_cost_ms`` in the scope to be reported. Findings are ordered by saving; the memory
findings, and ``LOW_OCCUPANCY`` (which cannot say what filling the SMs would win), come after.

The savings come from the GPUs' idle gaps charged to their cause (:mod:`traceconv.analyses.summary.timeline.gaps`):
the gaps that followed a sync waiting for a result (``SYNC_STALLS``) or staging a pageable copy
(``PAGEABLE_COPIES``); short gaps between launches (``TINY_KERNELS``, when most kernels are shorter
than their launch call; else ``GPU_IDLE``); long gaps of the host's own work (``GPU_IDLE``). The
copies' saving is their GPU time (``HOST_DEVICE_COPIES``); the SMs' is the busy time in which
SMs sat idle (``LOW_SM_ACTIVITY``); the matrix work's, from :mod:`traceconv.analyses.roofline`, what
the tensor cores would take off the CUDA cores' time (``NO_TENSOR_CORES``) and what the tensor-core
kernels lose to their roofs when MFU is low (``LOW_MFU``): see :mod:`.matrix`. Fixes are
phrased for the program the trace comes from and chosen by what the host was doing
(:mod:`traceconv.analyses.summary.advice`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from traceconv.analyses.finding import Finding, ordered
from traceconv.analyses.metrics import Utilisation
from traceconv.analyses.prepare import Program
from traceconv.analyses.results import CallTally, OpTally
from traceconv.analyses.roofline import Roofline
from traceconv.analyses.summary.advice import fix, idle_fix, tiny_fix
from traceconv.analyses.summary.matrix import CHECKS as MATRIX_CHECKS
from traceconv.analyses.summary.measure import ScopeStats
from traceconv.analyses.summary.timed import costly, per_of, timed, where, wins
from traceconv.analyses.thresholds import DEFAULTS, Thresholds
from traceconv.names import kernel_label, shorten
from traceconv.units import count, mb, ms, us

CODES = (
    "HOST_DEVICE_COPIES",
    "SYNC_STALLS",
    "PAGEABLE_COPIES",
    "GPU_IDLE",
    "LOW_OCCUPANCY",
    "TINY_KERNELS",
    "LOW_SM_ACTIVITY",
    "NO_TENSOR_CORES",
    "LOW_MFU",
    "RECOMPILES",  # traceconv.analyses.summary.recompiles
    # memory (traceconv.analyses.summary.memory_findings)
    "MEMORY_GROWTH",
    "FRAGMENTATION",
)
HOST_DEVICE = ("HtoD", "DtoH")
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
    roofline: Roofline | None = None,
) -> list[Finding]:
    """The findings of one scope, by what their fixes would win; ``utilisation``: its GPU metrics,
    if any (:func:`traceconv.analyses.metrics.scope_means`); ``roofline``: its matrix work
    (:func:`traceconv.analyses.roofline.roofline`)."""
    out = [f for check in _CHECKS if (f := check(stats, thresholds, program)) is not None]
    if utilisation and (sm := low_sm_activity(stats, utilisation, thresholds, program)) is not None:
        out.append(sm)
    if roofline is not None:
        out += [f for check in MATRIX_CHECKS if (f := check(stats, roofline, thresholds, program)) is not None]
    return ordered(out)


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
    per = per_of(stats)
    count, size = sum(p.count for p in parts), sum(p.bytes for p in parts)
    pageable = sum(p.pageable_count for p in parts)
    ops = sorted((o for p in parts for o in p.ops), key=lambda o: -o.dur_ns)
    top = f"; {ops[0].dur_ns * 100 / dur:.0f}% from {_causes(ops[:1], program)}" if ops and dur else ""
    saving = per.per_step(dur)
    msg = (
        f"{'+'.join(k for k in HOST_DEVICE if k in stats.memcpy)} copies take {value:.1f}% of GPU time "
        f"{where(stats)}: {ms(dur)}, {mb(size)} in {count:,} copies ({pageable:,} pageable){top}; "
        f"{wins(per, saving)}. Fix: {fix('HOST_DEVICE_COPIES', program)}"
    )
    return timed("HOST_DEVICE_COPIES", value, t.HOST_DEVICE_COPIES, msg, per, saving)


def sync_stalls(stats: ScopeStats, t: Thresholds, program: Program) -> Finding | None:
    sync, scope, gaps = stats.sync.result_waits, stats.scope, stats.gaps
    per_step = scope.name == "steps"
    value = sync.count / scope.steps if per_step else float(sync.stalls)
    cost = _blocking_cost(stats, gaps.result_wait_ns, sync.dur_ns)
    if value < t.SYNC_STALLS or not sync.count or not costly(stats, cost, t):
        return None
    per = per_of(stats)
    saving = per.per_step(cost)
    calls = ", ".join(f"{c.name} x{c.count}" for c in sync.calls[:3])
    causes = _causes(gaps.result_wait_ops[:4] or sync.ops[:4], program, sync.calls[:3])
    head = (
        f"{count(value)} host sync{'' if value == 1 else 's'} per step wait{'s' if value == 1 else ''} for a GPU "
        f"result ({calls}, "
        f"{us(sync.dur_ns / scope.steps)} blocked per step)"
        if per_step
        else f"{sync.stalls:,} host syncs wait for a GPU result and are followed by more GPU work in the profiled "
        f"window ({calls}, {us(sync.dur_ns)} blocked)"
    )
    msg = (
        f"{head}, from {causes}. Each drains the GPU's queue: the GPU sat idle "
        f"{ms(per.per_step(gaps.result_wait_ns))} a step after them until the host had queued more work; "
        f"{wins(per, saving)}. Fix: {fix('SYNC_STALLS', program)}"
    )
    return timed("SYNC_STALLS", value, t.SYNC_STALLS, msg, per, saving)


def pageable_copies(stats: ScopeStats, t: Thresholds, program: Program) -> Finding | None:
    staged, scope, gaps = stats.sync.staging, stats.scope, stats.gaps
    n = scope.steps
    value = staged.count / n
    blocked = staged.copy_call_ns + staged.dur_ns
    cost = _blocking_cost(stats, gaps.staging_ns, blocked)
    if value < t.PAGEABLE_COPIES or not staged.count or not costly(stats, cost, t):
        return None
    per = per_of(stats)
    saving = per.per_step(cost)
    each = " per step" if scope.name == "steps" else ""
    causes = "; ".join(f"{o.label} x{o.count}" for o in (gaps.staging_ops or staged.ops)[:4])
    msg = (
        f"{count(value)} HtoD copies{each} ({mb(staged.bytes / n)}) from pageable memory block the host while they "
        f"are staged through a pinned buffer ({us(blocked / n)}{each}), and the GPU's queue drains meanwhile "
        f"(idle {ms(per.per_step(gaps.staging_ns))} a step after them); from {causes}; {wins(per, saving)}. "
        f"Fix: {fix('PAGEABLE_COPIES', program)}"
    )
    return timed("PAGEABLE_COPIES", value, t.PAGEABLE_COPIES, msg, per, saving)


HOST_LIMITED = ("cpu-bound", "launch-bound")


def _blocking_cost(stats: ScopeStats, gap_ns: int, blocked_ns: int) -> int:
    """What removing host-blocking syncs would win: the GPU's idle gaps that followed them; where the
    host is the limit (the verdict), at least the time the host spent blocked in them, which it
    would then spend on its own work."""
    if stats.bound.verdict in HOST_LIMITED:
        return max(gap_ns, blocked_ns)
    return gap_ns


def _tiny(stats: ScopeStats, t: Thresholds) -> float | None:
    """The share of launched kernels shorter than their own launch call, when there are enough."""
    f = stats.launch
    if f.launched < t.min_kernels:
        return None
    return f.shorter_than_launch * 100.0 / f.launched


def gpu_idle(stats: ScopeStats, t: Thresholds, program: Program) -> Finding | None:
    """The GPUs waiting for the host's own work (long gaps), and for its launches where the kernels
    are not tiny (else TINY_KERNELS has those)."""
    window = sum(d.window_ns for d in stats.gpu.values())
    if not window:
        return None
    gaps = stats.gaps
    if stats.bound.gpu_busy_pct >= t.gpu_bound_pct:
        return None  # the GPUs are the limit: what idle time is left is not the host's to win
    launch = _idle_launch(stats, t)
    cost = gaps.host_ns + launch
    per = per_of(stats)
    saving = per.per_step(cost)
    value = per.pct(saving)
    if value < t.GPU_IDLE or not costly(stats, cost, t):
        return None
    busy = sum(d.busy_ns for d in stats.gpu.values())
    idle = (window - busy) * 100.0 / window
    doing = _host_doing(stats, launch)
    msg = (
        f"GPU idle {idle:.0f}% of the time {where(stats)} (busy {ms(busy)} of {ms(window)}); it waits "
        f"{ms(saving)} a step for the host: {doing}; {wins(per, saving)}. "
        f"Fix: {idle_fix(_dominant(gaps, launch), program, gaps.host_activity[0].name if gaps.host_activity else None)}"
    )
    return timed("GPU_IDLE", value, t.GPU_IDLE, msg, per, saving)


def _idle_launch(stats: ScopeStats, t: Thresholds) -> int:
    """The launch gaps ``GPU_IDLE`` counts: none where the kernels are tiny (``TINY_KERNELS`` has them)."""
    tiny = _tiny(stats, t)
    return 0 if tiny is not None and tiny >= t.TINY_KERNELS else stats.gaps.launch_ns


def idle_cause(stats: ScopeStats, t: Thresholds = DEFAULTS) -> str:
    """What the host mostly did while the GPU waited for it, as ``GPU_IDLE`` weighs it (see :func:`_dominant`)."""
    return _dominant(stats.gaps, _idle_launch(stats, t))


def _dominant(gaps: Any, launch: int) -> str:
    """What the host mostly did while the GPU waited: ``launch``, ``cuda_calls``, ``outside_ops`` or
    ``cpu_ops``."""
    inside = gaps.host_ns - gaps.host_outside_ops_ns
    outside = max(gaps.host_outside_ops_ns - gaps.host_api_ns, 0)
    parts = {"launch": launch, "cuda_calls": gaps.host_api_ns, "outside_ops": outside, "cpu_ops": inside}
    return max(parts, key=lambda k: parts[k])


def _host_doing(stats: ScopeStats, launch: int) -> str:
    gaps = stats.gaps
    per = per_of(stats)
    out = []
    if gaps.host_ns:
        outside = gaps.host_outside_ops_ns * 100.0 / gaps.host_ns
        ranges = ", ".join(f"{shorten(a.name, 40)} {ms(per.per_step(a.overlap_ns))}" for a in gaps.host_activity[:3])
        out.append(
            f"{ms(per.per_step(gaps.host_ns))} in long gaps (the host's own work, {outside:.0f}% of it outside every "
            f"operator and range: Python, data loading{'; in ' + ranges if ranges else ''})"
        )
    if launch:
        out.append(f"{ms(per.per_step(launch))} in short gaps between launches (operator dispatch, launch calls)")
    return "; ".join(out) or "nothing recorded"


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
        f"kernels run at {value:.0f}% estimated achieved occupancy (time-weighted over {f.occupancy_kernels:,} "
        f"kernels){_limited(f.occupancy_limiters)}; the longest below {t.LOW_OCCUPANCY:.0f}%: {names}. What "
        f"filling the SMs would win is not known from the trace (tensor-core GEMMs run well at low occupancy). "
        f"Fix: {fix('LOW_OCCUPANCY', program)}"
    )
    return Finding("LOW_OCCUPANCY", "low", msg, round(value, 2), t.LOW_OCCUPANCY)


def _limited(limiters: dict[str, int]) -> str:
    """What limits the occupancy, by the kernels' execution time: ", limited by grid 80%, registers 15%"."""
    total = sum(limiters.values())
    if not total:
        return ""
    said = ", ".join(f"{LIMITERS.get(k, k)} {ns * 100 / total:.0f}%" for k, ns in list(limiters.items())[:3])
    return f", limited by (share of kernel time) {said}"


def tiny_kernels(stats: ScopeStats, t: Thresholds, program: Program) -> Finding | None:
    """Most kernels shorter than their own launch call, and the GPU idle in the short gaps between them."""
    value = _tiny(stats, t)
    gaps = stats.gaps
    if value is None or value < t.TINY_KERNELS or not costly(stats, gaps.launch_ns, t):
        return None
    if stats.bound.gpu_busy_pct >= t.gpu_bound_pct:
        return None  # the GPUs are the limit, the launches keep up
    f = stats.launch
    per = per_of(stats)
    saving = per.per_step(gaps.launch_ns)
    names = ", ".join(f"{_trim(n)} x{c}" for n, c in f.tiny_names.items())
    msg = (
        f"{value:.0f}% of kernels ({f.shorter_than_launch:,} of {f.launched:,}) run shorter than their own "
        f"launch call (median {us(f.tiny_median_ns or 0)} vs {us(f.launch_median_ns or 0)} to launch): the GPU "
        f"sits idle {ms(saving)} a step in short gaps while the host dispatches and launches the next; most "
        f"frequent: {names}; {wins(per, saving)}. Fix: {tiny_fix(program)}"
    )
    return timed("TINY_KERNELS", value, t.TINY_KERNELS, msg, per, saving)


# -- GPU metrics (Nsight Systems --gpu-metrics-devices) ----------------------------------------
LIMITERS = {
    "grid": "too few blocks in the grid for the SMs",
    "registers": "registers per thread",
    "shared_memory": "shared memory per block",
    "block_size": "block size (warp slots)",
    "blocks": "blocks per SM",
}


def low_sm_activity(stats: ScopeStats, u: Utilisation, t: Thresholds, program: Program) -> Finding | None:
    """SMs Active while the GPU runs kernels below the threshold: the samples' mean in the scope over
    the share of the scope in which the GPU ran kernels (idle time is the idle findings', copies use
    no SM); the saving: the kernels' time in which the SMs were not active."""
    active = {d: m["sm_active_pct"] for d, m in u.items() if "sm_active_pct" in m}
    window = sum(d.window_ns for d in stats.gpu.values())
    busy = sum(d.busy_ns for d in stats.gpu.values()) * 100.0 / window if window else 0.0
    if not active or busy < t.sm_busy_pct or stats.launch.kernels < t.min_kernels:
        return None

    # The kernels' time per GPU (the scope's kernel table is per name: shared evenly where several)
    kernel_ns = stats.kernels["dur_ns"].sum() / max(len(stats.gpu), 1)

    def while_busy(device: str) -> float:
        """SMs Active over the share of the window in which kernels ran (copies keep no SM busy)."""
        g = stats.gpu.get(device)
        if g is None or not g.window_ns:
            return min(active[device] * 100.0 / max(busy, 1e-9), 100.0)
        ran = min(g.busy_ns, kernel_ns) * 100.0 / g.window_ns
        return min(active[device] * 100.0 / max(ran, 1e-9), 100.0)

    device = min(active, key=while_busy)
    value = while_busy(device)
    if value >= t.LOW_SM_ACTIVITY:
        return None
    m = u[device]
    warps = f", compute warps in flight {m['warps_in_flight_pct']:.0f}%" if "warps_in_flight_pct" in m else ""
    issue = f", SM issue {m['sm_issue_pct']:.0f}%" if "sm_issue_pct" in m else ""
    f = stats.launch
    avg = stats.kernels["dur_ns"].sum() / max(f.kernels, 1)
    per = per_of(stats)
    dev_busy = stats.gpu[device].busy_ns if device in stats.gpu else sum(d.busy_ns for d in stats.gpu.values())
    saving = min(dev_busy, kernel_ns) / max(stats.scope.steps, 1) * (1.0 - value / 100.0)
    msg = (
        f"SMs active {value:.1f}% of the time GPU {device} runs kernels {where(stats)} (GPU metrics: "
        f"{active[device]:.1f}% of the time{issue}{warps}; the GPU runs work {busy:.0f}% of the time): "
        f"{f.kernels:,} kernels of {us(avg)} on average leave most SMs without a block; kernels that filled the "
        f"SMs would win up to {ms(saving)} a step ({per.pct(saving):.0f}%). Fix: {fix('LOW_SM_ACTIVITY', program)}"
    )
    return timed("LOW_SM_ACTIVITY", value, t.LOW_SM_ACTIVITY, msg, per, saving)


def _short(row: Any) -> str:
    return _trim(kernel_label(str(row["name"])))


def _trim(name: str, width: int = 48) -> str:
    return shorten(kernel_label(name), width)


_CHECKS: tuple[Callable[[ScopeStats, Thresholds, Program], Finding | None], ...] = (
    host_device_copies,
    sync_stalls,
    pageable_copies,
    gpu_idle,
    low_occupancy,
    tiny_kernels,
)
