"""The columns ``traceconv ops`` sorts by: ours and torch's names for them (light: the CLI imports it at start)."""

from __future__ import annotations

COLUMNS = (
    "self_cpu_ns",
    "cpu_total_ns",
    "self_gpu_ns",
    "gpu_total_ns",
    "cpu_mem_bytes",
    "self_cpu_mem_bytes",
    "gpu_mem_bytes",
    "self_gpu_mem_bytes",
    "calls",
    "cpu_time",
    "cuda_time",
)
# torch's table(sort_by=...) names
TORCH_NAMES = {
    "self_cpu_time_total": "self_cpu_ns",
    "cpu_time_total": "cpu_total_ns",
    "self_cuda_time_total": "self_gpu_ns",
    "cuda_time_total": "gpu_total_ns",
    "self_device_time_total": "self_gpu_ns",
    "device_time_total": "gpu_total_ns",
    "cpu_memory_usage": "cpu_mem_bytes",
    "self_cpu_memory_usage": "self_cpu_mem_bytes",
    "cuda_memory_usage": "gpu_mem_bytes",
    "self_cuda_memory_usage": "self_gpu_mem_bytes",
    "count": "calls",
    "device_time": "cuda_time",
}
SORT_CHOICES = sorted({*COLUMNS, *TORCH_NAMES})
