"""The fix each finding suggests, in the words of the program it speaks to.

A PyTorch program is told about ``pin_memory`` and ``torch.compile``; a CUDA (or CuPy,
OpenACC ...) program about pinned host memory and kernel fusion in CUDA's terms. A program
that already replays CUDA graphs is not told to use them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Program:
    """What a trace says about the program that made it."""

    framework: str  # "pytorch", or "cuda" for anything else
    cuda_graphs: bool  # it launches CUDA graphs already


_FIXES: dict[str, dict[str, str]] = {
    "HOST_DEVICE_COPIES": {
        "pytorch": "create such tensors on the GPU (torch.rand(..., device='cuda')) instead of copying them each step, "
        "and keep results there (no per-step .cpu())",
        "cuda": "keep the data on the GPU between kernels: copy it once, reuse device buffers, and copy results "
        "back only when the host needs them",
    },
    "SYNC_STALLS": {
        "pytorch": "keep values on the GPU (no .item()/.cpu()/print in the step; log every N steps)",
        "cuda": "synchronise only where the host needs a result (an event on the stream that makes it), and queue "
        "the next work first",
    },
    "PAGEABLE_COPIES": {
        "pytorch": "allocate the host tensor with pin_memory=True (DataLoader(pin_memory=True)) and copy with "
        "non_blocking=True",
        "cuda": "copy from pinned host memory (cudaMallocHost or cudaHostRegister; CuPy: cupyx.empty_pinned) with "
        "cudaMemcpyAsync on a stream",
    },
    "QUEUE_WAIT": {
        "pytorch": "make the GPU work cheaper (mixed precision, fused kernels via torch.compile); for latency, this "
        "wait adds to every result",
        "cuda": "make the kernels cheaper (lower precision, fusion, tuning); for latency, this wait adds to every "
        "result",
    },
    "LOW_OCCUPANCY": {
        "pytorch": "small grids or heavy register/shared memory use leave SMs idle: larger batches, fused kernels "
        "(torch.compile), or fewer, larger operations fill the GPU",
        "cuda": "small grids or heavy register/shared memory use leave SMs idle: larger grids, __launch_bounds__, "
        "fewer registers or less shared memory per block fill the GPU",
    },
    # -- memory --
    "MEMORY_GROWTH": {
        "pytorch": "find what keeps tensors from one step to the next: a list or dict of outputs, losses logged "
        "as tensors (log loss.item() or loss.detach(), not loss), hidden states carried without .detach(); "
        "torch.cuda.empty_cache() is not the fix, it only returns memory nobody holds",
        "cuda": "free what each step allocates (every cudaMalloc needs its cudaFree), or allocate the buffers "
        "once before the loop and reuse them",
    },
    "FRAGMENTATION": {
        "pytorch": "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True so the caching allocator grows segments "
        "instead of reserving new ones; allocate the largest, long-lived tensors first and keep shapes stable "
        "from step to step",
        "cuda": "allocate large buffers once and sub-allocate from them (a memory pool: cudaMallocAsync with a "
        "release threshold) instead of many differently sized cudaMalloc calls",
    },
    "LOW_SM_ACTIVITY": {
        "pytorch": "launch fewer, larger kernels: merge the small convolutions or GEMMs into one (grouped "
        "convolutions: conv2d(groups=N); batched GEMMs: torch.bmm over stacked weights), use larger batches, "
        "or fuse with torch.compile",
        "cuda": "launch fewer, larger kernels: merge the small convolutions or GEMMs into one launch (grouped "
        "convolutions, cublasGemmBatched / strided-batched GEMMs), use larger batches, or fuse kernels",
    },
}


def fix(code: str, program: Program) -> str:
    return _FIXES[code][program.framework if program.framework in _FIXES[code] else "cuda"]


def idle_fix(cause: str, program: Program) -> str:
    """The fix for GPU idle time whose largest part is ``cause`` (an IdleBreakdown field)."""
    torch = program.framework == "pytorch"
    if cause == "host_launch":
        if program.cuda_graphs:
            return "fuse the work that is still launched kernel by kernel" + (" (torch.compile)" if torch else "")
        return "cut launches (torch.compile, CUDA graphs)" if torch else "launch fewer, larger kernels, or a CUDA graph"
    if cause == "host_sync":
        return "remove the synchronisations and synchronous copies in the loop (see SYNC_STALLS and PAGEABLE_COPIES)"
    if cause == "queued":
        return "the GPU waits on its own dependencies (events, other streams or GPUs): overlap them with compute"
    if torch:
        return "move that work to the GPU or off the critical path (DataLoader workers, prefetch the next batch)"
    return "overlap the host's work with the GPU's (launch asynchronously, double-buffer the inputs)"


def tiny_fix(program: Program) -> str:
    if program.cuda_graphs:
        return (
            "fuse them"
            + (" (torch.compile)" if program.framework == "pytorch" else "")
            + ("; the step already replays CUDA graphs, so what is left is the GPU's own cost per kernel")
        )
    if program.framework == "pytorch":
        return "fuse them (torch.compile) or replay the step as a CUDA graph"
    return "fuse them, or launch them as a CUDA graph"
