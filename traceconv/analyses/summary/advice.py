"""The fix each finding suggests, in the words of the program it speaks to.

A PyTorch program is told about ``pin_memory`` and ``torch.compile``; a CUDA (or CuPy,
OpenACC ...) program about pinned host memory and kernel fusion in CUDA's terms. A program
that already replays CUDA graphs is not told to use them.
"""

from __future__ import annotations

from traceconv.analyses.prepare import Program

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
    "LOW_OCCUPANCY": {
        "pytorch": "small grids or heavy register/shared memory use leave SMs idle: larger batches, fused kernels "
        "(torch.compile), or fewer, larger operations fill the GPU",
        "cuda": "small grids or heavy register/shared memory use leave SMs idle: larger grids, __launch_bounds__, "
        "fewer registers or less shared memory per block fill the GPU",
    },
    # -- the matrix work (traceconv.analyses.roofline) --
    "NO_TENSOR_CORES": {  # fp32 matrix products on the CUDA cores
        "pytorch": 'torch.set_float32_matmul_precision("high") (TF32 matmuls; cuDNN convolutions use TF32 by '
        'default), or bf16 autocast: torch.autocast("cuda", dtype=torch.bfloat16)',
        "cuda": "cublasSetMathMode(handle, CUBLAS_TF32_TENSOR_OP_MATH) or CUBLAS_COMPUTE_32F_FAST_TF32 for fp32 "
        "GEMMs, or compute in bf16/fp16",
    },
    "NO_TENSOR_CORES_AMP": {  # fp32 on a GPU whose tensor cores have no TF32, or gain little from it
        "pytorch": 'run the forward pass under autocast: torch.autocast("cuda", dtype=torch.bfloat16), or '
        "torch.float16 with torch.amp.GradScaler where the GPU has no bf16 (V100)",
        "cuda": "compute the GEMMs in fp16 or bf16 (cublasGemmEx with CUDA_R_16F/CUDA_R_16BF inputs)",
    },
    "NO_TENSOR_CORES_16": {  # 16-bit matrix work that the libraries ran on the CUDA cores all the same
        "pytorch": "make matrix dimensions multiples of 8, use channels_last for convolutions and "
        "torch.backends.cudnn.benchmark = True, so that the libraries can pick tensor-core kernels",
        "cuda": "make matrix dimensions multiples of 8, use NHWC convolutions and let cuDNN pick by benchmark, "
        "so that the libraries can pick tensor-core kernels",
    },
    "LOW_MFU": {
        "pytorch": "the findings above first; then larger matrices a launch, bf16, fused kernels (torch.compile)",
        "cuda": "the findings above first; then larger GEMMs, 16-bit types on the tensor cores, fused kernels",
    },
    "RECOMPILES": {
        "pytorch": "see which guard fails with TORCH_LOGS=recompiles (usually a shape that changes from step to "
        "step); mark that dimension dynamic (torch.compile(dynamic=True), or torch._dynamo.mark_dynamic(x, dim) "
        "before the call), or pad the inputs to one or a few fixed shapes so that the compiled graphs are reused",
        "cuda": "compile once, before the steps: keep the inputs' shapes fixed (pad them to a few sizes) so that "
        "the compiled code is reused",
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


def idle_fix(cause: str, program: Program, busiest: str | None = None) -> str:
    """The fix for a GPU that waits for its host, by what the host mostly did meanwhile: ``launch``
    (short gaps: operator dispatch and kernel launches), ``cuda_calls`` (long CUDA calls: set-up),
    ``outside_ops`` (its own work outside any operator: a data pipeline, Python between steps) or
    ``cpu_ops`` (CPU-side operators); ``busiest``: the operator or range the host spent most of
    those gaps in (an optimizer's step has a fix of its own)."""
    torch = program.framework == "pytorch"
    if torch and cause == "cpu_ops" and busiest and busiest.startswith("Optimizer."):
        return (
            f"the optimizer's step ({busiest}) is the host's largest cost: a fused optimizer runs it in a few "
            "kernels (torch.optim.AdamW(..., fused=True)), or compile it with the step (torch.compile); "
            "what remains: run the other CPU operators named above on the GPU, or off the step"
        )
    if cause == "launch":
        if program.cuda_graphs:
            return "fuse the work that is still launched kernel by kernel" + (
                " (torch.compile), or batch more work into each launch" if torch else ", or batch it"
            )
        if torch:
            return (
                "cut the per-kernel host cost: capture the step in a CUDA graph (torch.cuda.CUDAGraph, or "
                "torch.compile(mode='reduce-overhead')), fuse kernels with torch.compile, or give each launch more "
                "work (larger batches)"
            )
        return "launch fewer, larger kernels, or capture the launches in a CUDA graph"
    if cause == "cuda_calls":
        return (
            "the host is inside CUDA calls (module loading, allocation, stream or graph creation): set-up "
            "belongs before the profiled steps (warm up first"
            + ("; torch.profiler.schedule(wait=..., warmup=...)" if torch else "")
            + "); where it recurs every step, allocate once and reuse"
        )
    if cause == "cpu_ops":
        if torch:
            return (
                "the CPU operators named above keep the host busy: run them on the GPU, or move them off the step "
                "(DataLoader workers)"
            )
        return "move the host's computation off the critical path, or to the GPU"
    if torch:
        return (
            "overlap the host's work with the GPU's: load and preprocess data in DataLoader workers "
            "(num_workers > 0, pin_memory=True), prefetch the next batch, or move the preprocessing to the GPU"
        )
    return "overlap the host's work with the GPU's (launch asynchronously, double-buffer the inputs)"


def tiny_fix(program: Program) -> str:
    if program.cuda_graphs:
        return (
            "batch them into fewer, larger operations, or fuse them"
            + (" (torch.compile)" if program.framework == "pytorch" else "")
            + ("; the step already replays CUDA graphs, so what is left is the work still launched one by one")
        )
    if program.framework == "pytorch":
        return (
            "batch them into fewer, larger operations (one grouped convolution, torch.bmm over stacked weights, "
            "larger batches), fuse them (torch.compile), or replay the step as a CUDA graph "
            "(torch.compile(mode='reduce-overhead'))"
        )
    return "batch them into fewer, larger kernels (batched or grouped GEMMs), fuse them, or launch them as a CUDA graph"
