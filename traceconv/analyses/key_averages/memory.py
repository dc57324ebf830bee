"""Allocator events (``[memory]``, ``profile_memory=True``) attributed as ``_parse_kineto_results`` does.

Every CPU event gets every allocation and free whose time lies in ``[start, end]``, from
any thread (``MemRecordsAcc.in_interval``): an operator's memory includes its children's,
and an allocation made on another thread while it ran. Bytes count as CPU memory for the
CPU, MKLDNN and IDEEP devices and as device memory for CUDA, HIP, XPU and PrivateUse1.
Allocations no CPU event encloses become events of their own, named ``[memory]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from traceconv.analyses import intervals as I
from traceconv.analyses.key_averages.events import I64, Bools

CPU, CUDA = 0, 1  # c10::DeviceType
CPU_DEVICES = (0, 2, 5)  # c10::DeviceType CPU, MKLDNN, IDEEP
GPU_DEVICES = (1, 6, 12, 20)  # CUDA, HIP, XPU, PrivateUse1


@dataclass(frozen=True)
class Records:
    """Allocator events: time, signed bytes, c10 device type, thread, row in the table."""

    time: I64
    bytes: I64
    device_type: I64
    thread: I64
    row: I64

    @property
    def cpu_bytes(self) -> I64:
        return np.where(np.isin(self.device_type, CPU_DEVICES), self.bytes, 0).astype(np.int64)

    @property
    def gpu_bytes(self) -> I64:
        return np.where(np.isin(self.device_type, GPU_DEVICES), self.bytes, 0).astype(np.int64)


def attribute(records: Records, start: I64, end: I64) -> tuple[I64, I64, Bools]:
    """Per CPU event ``[start, end]``: CPU bytes, device bytes; per record: whether some event took it."""
    if not len(records.time):
        zeros = np.zeros(len(start), np.int64)
        return zeros, zeros.copy(), np.zeros(0, bool)
    order = np.argsort(records.time, kind="stable")
    t = records.time[order]
    cpu = np.r_[0, np.cumsum(records.cpu_bytes[order])]
    gpu = np.r_[0, np.cumsum(records.gpu_bytes[order])]
    lo = np.searchsorted(t, start, side="left")
    hi = np.searchsorted(t, end, side="right")
    hi = np.maximum(hi, lo)
    used = I.inside(records.time, start, end) if len(start) else np.zeros(len(t), bool)
    return (cpu[hi] - cpu[lo]).astype(np.int64), (gpu[hi] - gpu[lo]).astype(np.int64), used
