"""traceconv's own view of the operators, and how (and why) it differs from torch's ``key_averages()``.

The same events and tree as torch's (:mod:`.aggregate`), counted differently:

- an operator's self CPU time includes the CUDA API calls it makes and the profiler's
  work inside it (torch makes both children and subtracts them);
- GPU time is counted once, at the operator whose kernels, copies and memsets it is:
  torch also copies an operator's GPU time onto every profiler-overhead event inside it,
  which inflates the totals of everything above those events;
- annotations (``record_function``, ``ProfilerStep#N``) are ranges with the GPU time of
  the work launched inside them; torch adds a CUDA row per annotation whose "Self CUDA" is
  the span of the annotation on the GPU;
- rows for CUDA API calls are a section of their own; kernels, copies and profiler
  overhead are not rows (see ``traceconv kernels``). Memory is as torch attributes it.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from traceconv.analyses.key_averages import aggregate as A
from traceconv.analyses.key_averages import tree as T
from traceconv.analyses.key_averages.events import ANNOTATION, MEMORY, OP, OVERHEAD, RUNTIME
from traceconv.analyses.key_averages.results import OpsDifference, OpStats
from traceconv.units import ms, us

_ROWS = (OP, ANNOTATION, MEMORY)


def view(measured: A.Measured, names: list[str], by_shape: bool, stack_n: int) -> tuple[list[OpStats], A.Measured]:
    """The operator and annotation rows of traceconv's view, and the per-event figures behind them."""
    frame = measured.frame.copy()
    what = frame["what"].to_numpy()
    dur = frame["cpu_total_ns"].to_numpy(np.int64)
    is_range = np.isin(what, (OP, ANNOTATION))
    not_range = np.where(np.isin(what, (RUNTIME, OVERHEAD, MEMORY)), dur, 0)
    own = frame["launched_ns"] if "launched_ns" in frame.columns else frame["self_gpu_ns"]
    own_kernels = np.where(is_range, own.to_numpy(np.int64), 0)
    frame["self_gpu_ns"] = np.where(is_range, own_kernels, frame["self_gpu_ns"])
    extra = T.child_sums(measured.parent, not_range)
    frame["self_cpu_ns"] = np.where(is_range, frame["self_cpu_ns"] + extra, frame["self_cpu_ns"])
    frame["gpu_total_ns"] = np.where(is_range, T.subtree_sums(measured.parent, own_kernels), frame["gpu_total_ns"])
    keep = np.flatnonzero(np.isin(what, _ROWS) & (frame["device"] == "cpu").to_numpy())
    sub = frame.iloc[keep].reset_index(drop=True)
    ours = A.Measured(sub, np.full(len(sub), -1, np.int64))
    return A.rows(ours, names, by_shape, stack_n), A.Measured(frame, measured.parent)


_SAME = {
    "calls": "the same calls: both fold an operator into its parent of the same name when it is the only child",
    "cpu_total_ns": "the same: an operator's duration",
    "self_gpu_ns": "the same: the GPU time of the kernels, copies and memsets an operator launched itself",
    "cpu_mem_bytes": "the same: torch's attribution (every allocation and free during the event, from any thread)",
    "self_cpu_mem_bytes": "the same: an operator's memory minus its children's",
    "gpu_mem_bytes": "the same: torch's attribution (every allocation and free during the event, from any thread)",
    "self_gpu_mem_bytes": "the same: an operator's memory minus its children's",
}
_COLUMNS = ("calls", "self_cpu_ns", "cpu_total_ns", "self_gpu_ns", "gpu_total_ns", "cpu_mem_bytes", "gpu_mem_bytes")


def differences(torch_rows: list[OpStats], ours: list[OpStats], base: A.Measured) -> list[OpsDifference]:
    """Per column, the sums over the operator and annotation rows both views have, why they
    differ, and by how much that reason accounts for (``explained``: ours - torch)."""
    key = {(r.name, r.device, r.input_shapes, tuple(r.stack or ())): r for r in torch_rows}
    pairs = [(o, key[(o.name, o.device, o.input_shapes, tuple(o.stack or ()))]) for o in ours]
    pairs = [(o, t) for o, t in pairs if o.kind in ("op", "annotation")]
    causes = _causes(base)
    out = []
    for column in _COLUMNS:
        mine, theirs = sum(getattr(o, column) for o, _ in pairs), sum(getattr(t, column) for _, t in pairs)
        reason, explained = causes.get(column, (_SAME.get(column, "the same"), 0))
        if mine == theirs and not explained:
            reason = _SAME.get(column, "the same")
        elif mine - theirs != explained:
            reason += f"; {mine - theirs - explained:+,} more for no reason traceconv knows of: please report it"
        out.append(OpsDifference(column, mine, theirs, reason, explained))
    out.append(_rows(torch_rows))
    annotation = _annotation(torch_rows, ours)
    if annotation:
        out.append(annotation)
    return out


def _causes(base: A.Measured) -> dict[str, tuple[str, int]]:
    """The known reasons for a difference, per column, with their amounts."""
    frame, parent = base.frame, base.parent
    what = frame["what"].to_numpy()
    dur = frame["cpu_total_ns"].to_numpy(np.int64)
    ranges = np.isin(what, (OP, ANNOTATION))
    under = (parent >= 0) & ranges[np.maximum(parent, 0)]
    calls, work = under & (what == RUNTIME), under & (what == OVERHEAD)
    other = under & ~ranges & ~calls & ~work
    self_cpu = (
        f"here an operator's self time includes the CUDA API calls it makes ({ms(dur[calls].sum())} in "
        f"{_count(calls.sum(), 'call')}) and the profiler's own work directly inside it ({ms(dur[work].sum())}, "
        f"{_count(work.sum(), 'event')}); torch makes both children of the operator, subtracts them and lists "
        "them as rows of their own"
    )
    out = {"self_cpu_ns": (self_cpu, int(dur[calls | work | other].sum()))}
    kernels = np.where(np.isin(what, (OP, ANNOTATION, RUNTIME, OVERHEAD)), frame["self_gpu_ns"].to_numpy(np.int64), 0)
    no_copies = np.where(what == OVERHEAD, 0, kernels)
    launched = np.where(ranges, frame["launched_ns"].to_numpy(np.int64), 0) if "launched_ns" in frame else no_copies
    totals = [int(T.subtree_sums(parent, v)[ranges].sum()) for v in (kernels, no_copies, launched)]
    orphans = int(launched[ranges].sum() - no_copies[ranges].sum())
    reasons = []
    if totals[0] != totals[1]:
        over = (what == OVERHEAD) & (kernels > 0)
        reasons.append(
            f"torch gives each profiler-overhead event inside an operator a copy of that operator's GPU time "
            f"({_count(over.sum(), 'event')}, {us(float(kernels[over].sum()))}), and the CUDA total of every operator "
            f"above such an event counts it again ({us(float(totals[0] - totals[1]))} more over these rows)"
        )
    if orphans:
        reasons.append(_orphans(orphans))
        out["self_gpu_ns"] = (_orphans(orphans), orphans)
    if reasons:
        out["gpu_total_ns"] = (
            "; ".join(reasons) + "; here each kernel, copy and memset counts once",
            totals[2] - totals[0],
        )
    return out


def _count(n: int | np.integer, what: str) -> str:
    return f"{int(n):,} {what}" + ("" if n == 1 else "s")


def _orphans(ns: int) -> str:
    return (
        f"{us(float(ns))} of GPU work has no External id (CUDA graph replays, work launched outside every "
        "operator): torch counts it for no operator, here it counts for the one around its launching call "
        "(a replayed kernel whose capture is in the profile: the operator that captured it)"
    )


def _rows(torch_rows: list[OpStats]) -> OpsDifference:
    counts = {k: sum(1 for r in torch_rows if r.kind == k) for k in ("gpu", "runtime", "overhead")}
    cpu = sum(r.cpu_total_ns for r in torch_rows if r.kind == "overhead")
    gpu_side = sum(1 for r in torch_rows if r.kind == "annotation" and r.device == "cuda")
    reason = (
        f"torch also has {counts['gpu']:,} rows of kernels, copies and memsets (see `traceconv kernels`), "
        f"{counts['runtime']:,} of CUDA API calls (below), {counts['overhead']:,} of profiler overhead "
        f"({ms(cpu)} of CPU time, left out here) and {gpu_side:,} of the GPU side of annotations"
    )
    ours = sum(1 for r in torch_rows if r.kind in ("op", "annotation", "memory") and r.device == "cpu")
    return OpsDifference("rows", ours, len(torch_rows), reason, ours - len(torch_rows))


def _annotation(torch_rows: list[OpStats], ours: list[OpStats]) -> OpsDifference | None:
    gpu_side = [r for r in torch_rows if r.kind == "annotation" and r.device == "cuda"]
    if not gpu_side:
        return None
    top = max(gpu_side, key=lambda r: r.self_gpu_ns)
    mine = next((r for r in ours if r.name == top.name and r.kind == "annotation"), None)
    launched = f", the work launched inside it {us(mine.gpu_total_ns)}" if mine else ""
    reason = (
        f"torch's GPU-side rows of annotations give the span of the annotation on the GPU as its 'Self CUDA' "
        f"(counted in no total; {top.name}: {us(top.self_gpu_ns)}{launched}); here an annotation's GPU time "
        "is that of the work launched inside it"
    )
    mine_total = sum(r.gpu_total_ns for r in ours if r.kind == "annotation")
    theirs = sum(r.self_gpu_ns for r in gpu_side)
    return OpsDifference("annotations", mine_total, theirs, reason, mine_total - theirs)


def runtime(torch_rows: list[OpStats]) -> list[OpStats]:
    """The CUDA API calls, as rows of their own (torch's rows of them, self time = their time)."""
    return [replace(r, self_cpu_ns=r.cpu_total_ns) for r in torch_rows if r.kind == "runtime"]
