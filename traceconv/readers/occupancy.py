"""Occupancy of kernels from their launch configuration and their device's limits.

The arithmetic is that of CUDA's occupancy calculator (``cuda_occupancy.h``, what CUPTI and
Kineto call), vectorised over kernels: how many blocks of a kernel fit on one SM at once,
limited by the registers, the shared memory, the warp slots and the blocks-per-SM cap.

- *theoretical occupancy*: those blocks' warps over the SM's warp slots (Nsight Compute's
  definition);
- *estimated achieved occupancy*, Kineto's ``est. achieved occupancy %``: no more blocks than
  the grid gives each SM (grid / SMs), in threads over the SM's thread slots. Kineto writes it
  rounded to a whole percent; here it keeps its fraction (a one-block kernel on a large GPU is
  a fraction of a percent, not 0), so it is within 0.5 of Kineto's figure.

Kineto calls the calculator as though no kernel had opted into more shared memory per block
than the default (48 KB), so every kernel that uses more gets 0 there. A kernel that launched
with more had opted in, up to at least what it used: here it is computed with the device's
opt-in limit, and :attr:`Result.kineto_pct` keeps what Kineto's call gives, for comparison.
Devices whose compute capability the calculator does not know get no figures.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from traceconv.readers.arrow_util import I64

F64 = npt.NDArray[np.float64]
UNLIMITED = 2**31 - 1  # the calculator's INT_MAX: a resource the kernel does not use
# What binds a kernel's occupancy, by code. Where several bind alike, the first of
# block_size, blocks, registers, shared_memory is named (at full occupancy that is the warp
# slots, not a resource that happens to fit exactly).
LIMITERS = ("registers", "shared_memory", "block_size", "blocks", "grid")
_REGISTERS, _SHARED, _BLOCK_SIZE, _BLOCKS, _GRID = range(5)
_TIE_ORDER = (_BLOCK_SIZE, _BLOCKS, _REGISTERS, _SHARED)
KB = 1024


@dataclass(frozen=True)
class Arch:
    """What the calculator knows of a compute capability (not reported by the device)."""

    smem_granularity: int  # shared memory is allocated to a block in multiples of this
    reg_granularity: int  # registers are allocated to a warp in multiples of this
    max_regs_per_thread: int
    sub_partitions: int  # registers are split between the SM's sub-partitions
    max_blocks_per_sm: int
    reserved_smem: int  # shared memory the driver reserves in every block (cudaDeviceProp.reservedSharedMemPerBlock)
    carveouts: tuple[int, ...] | None  # the per-SM shared memory sizes (KB) an SM can be set to (Volta on)
    gp100: bool = False  # 6.0: a kernel must also fit the 4 sub-partitions of the other Pascal chips


_VOLTA = (0, 8, 16, 32, 64, 96)
_AMPERE = (0, 8, 16, 32, 64, 100, 132, 164)  # 8.0, 8.7
_AMPERE_SMALL = (0, 8, 16, 32, 64, 100)  # 8.6, 8.9
_HOPPER = (*_AMPERE, 196, 228)


def arch(major: int, minor: int) -> Arch | None:
    """The architecture table for compute capability ``major.minor``; None where unknown.

    3.x to 9.x as in CUDA 12's ``cuda_occupancy.h``. 10.x (Blackwell data-centre parts) is
    beyond that header; it is taken as 9.x, which reproduces every Kineto figure of the
    corpus's B200 trace (tests/test_occupancy.py).
    """
    if major == 3:
        return Arch(256, 256, 255, 4, 16, 0, None)
    if major in (5, 6):
        return Arch(256, 256, 255, 2 if (major, minor) == (6, 0) else 4, 32, 0, None, gp100=(major, minor) == (6, 0))
    if major == 7:
        turing = minor == 5
        return Arch(256, 256, 256, 4, 16 if turing else 32, 0, (32, 64) if turing else _VOLTA)
    if major == 8:
        blocks = 32 if minor == 0 else 24 if minor == 9 else 16
        return Arch(128, 256, 256, 4, blocks, KB, _AMPERE if minor in (0, 7) else _AMPERE_SMALL)
    if major in (9, 10):
        return Arch(128, 256, 256, 4, 32, KB, _HOPPER)
    return None


@dataclass(frozen=True)
class Device:
    """The limits of one GPU that occupancy depends on, as the trace reports them."""

    major: int
    minor: int
    sms: int
    warp_size: int
    threads_per_sm: int
    threads_per_block: int
    regs_per_sm: int
    regs_per_block: int
    smem_per_sm: int
    smem_per_block: int  # the default per-block limit (48 KB)
    smem_per_block_optin: int | None  # None: not reported (a launched kernel is then taken to fit)
    blocks_per_sm: int | None = None  # the device's own figure; None: the architecture's

    @property
    def arch(self) -> Arch | None:
        return arch(self.major, self.minor)


@dataclass(frozen=True)
class Fit:
    """How many blocks of each launch configuration fit on one SM at once (the grid aside);
    -1 where the calculator has no answer."""

    active: I64  # with the opt-in shared memory the kernel launched with
    kineto_active: I64  # as Kineto calls the calculator (no opt-in)
    binds: I64  # index into LIMITERS of what binds (-1: no answer)


@dataclass(frozen=True)
class Result:
    """Per kernel; NaN (code -1) where a figure cannot be computed."""

    theoretical_pct: F64
    est_pct: F64  # Kineto's definition, with the opt-in shared memory the kernel launched with
    est_as_kineto: F64  # the same as Kineto writes it (single precision, a whole percent)
    kineto_pct: F64  # what Kineto's own call of the calculator writes (no opt-in)
    limiter: I64  # index into LIMITERS


def calculate(device: Device, threads: I64, regs: I64, smem: I64, blocks: I64) -> Result:
    """Occupancy of kernels on ``device``: block size (threads), registers per thread, static +
    dynamic shared memory per block (bytes) and grid size (blocks; < 0 where unknown)."""
    return occupancy(device, fit(device, threads, regs, smem), threads, blocks)


def fit(device: Device, threads: I64, regs: I64, smem: I64) -> Fit:
    """The calculator's ``activeBlocksPerMultiprocessor`` for each configuration on ``device``."""
    n = len(threads)
    a = device.arch
    if a is None:
        none = np.full(n, -1, dtype=np.int64)
        return Fit(none, none, none)
    smem_limit, fits = _smem_limit(device, a, smem, opt_in=True)
    cap = np.full(n, device.blocks_per_sm or a.max_blocks_per_sm, dtype=np.int64)
    limits = [_register_limit(device, a, threads, regs), smem_limit, _warp_limit(device, threads), cap]
    active = np.minimum.reduce(limits)  # in the order of LIMITERS
    kineto_smem_limit, kineto_fits = _smem_limit(device, a, smem, opt_in=False)
    kineto_active = np.minimum.reduce([*limits[:_SHARED], kineto_smem_limit, *limits[_SHARED + 1 :]])
    binds = np.full(n, -1, dtype=np.int64)
    for which in reversed(_TIE_ORDER):
        binds = np.where(limits[which] == active, which, binds)
    return Fit(np.where(fits, active, -1), np.where(kineto_fits, kineto_active, -1), np.where(fits, binds, -1))


def occupancy(device: Device, f: Fit, threads: I64, blocks: I64) -> Result:
    """The figures of kernels whose configurations :func:`fit` gave ``f``, on grids of ``blocks``."""
    fits, kineto_fits, known = f.active >= 0, f.kineto_active >= 0, blocks >= 0
    active = np.maximum(f.active, 0)
    warps = _ceil_div(threads, device.warp_size)
    theoretical = np.where(fits, active * warps / (device.threads_per_sm // device.warp_size) * 100, np.nan)
    resident = np.minimum(active, np.maximum(blocks, 0) / device.sms)
    est = np.where(fits & known, resident * threads / device.threads_per_sm * 100, np.nan)
    per_sm = _blocks_per_sm(blocks, device.sms)
    as_kineto = np.where(fits & known, _kineto_pct(active, per_sm, threads, device), np.nan)
    kineto = _kineto_pct(np.maximum(f.kineto_active, 0), per_sm, threads, device)
    kineto = np.where(kineto_fits & known, kineto, np.nan)
    by_grid = known & (per_sm < active) & (active > 0)
    return Result(theoretical, est, as_kineto, kineto, np.where(fits & by_grid, _GRID, f.binds))


def _ceil_div(x: I64, y: int | I64) -> I64:
    return -(-x // y)


def _round_up(x: I64, y: int) -> I64:
    return _ceil_div(x, y) * y


def _warp_limit(d: Device, threads: I64) -> I64:
    per_block = _ceil_div(threads, d.warp_size)
    blocks = (d.threads_per_sm // d.warp_size) // np.maximum(per_block, 1)
    return np.where(threads > d.threads_per_block, 0, blocks)


def _register_limit(d: Device, a: Arch, threads: I64, regs: I64, sub_partitions: int | None = None) -> I64:
    """Blocks that the SM's registers hold: allocated per warp (rounded to the granularity),
    each sub-partition holding whole warps."""
    parts = sub_partitions or a.sub_partitions
    warps = _ceil_div(threads, d.warp_size)
    per_warp = _round_up(regs * d.warp_size, a.reg_granularity)
    # The hardware checks the per-block limit as if every sub-partition got a share of the warps.
    checked = per_warp * _round_up(warps, parts)
    fits = (per_warp * warps <= d.regs_per_block) & (checked <= d.regs_per_block) & (regs <= a.max_regs_per_thread)
    warps_per_part = (d.regs_per_sm // parts) // np.maximum(per_warp, 1)
    blocks = np.where(per_warp > 0, warps_per_part * parts // np.maximum(warps, 1), UNLIMITED)
    limit = np.where(fits, blocks, 0)
    if a.gp100 and sub_partitions is None:  # must also run on the Pascal chips with 4 sub-partitions
        limit = np.where(_register_limit(d, a, threads, regs, 4) == 0, 0, limit)
    return limit


def _smem_limit(d: Device, a: Arch, smem: I64, opt_in: bool) -> tuple[I64, npt.NDArray[np.bool_]]:
    """Blocks that the SM's shared memory holds, and where the calculator has an answer at all
    (an SM size that no carveout of the architecture reaches has none)."""
    alloc = _round_up(smem + a.reserved_smem, a.smem_granularity)
    per_block = np.full(len(smem), d.smem_per_block, dtype=np.int64)
    if opt_in:  # a kernel launched with more than the default had opted in to at least that much
        optin = d.smem_per_block_optin if d.smem_per_block_optin is not None else UNLIMITED
        per_block[smem + a.reserved_smem > d.smem_per_block] = optin
    exceeded = alloc > per_block + (a.reserved_smem if d.major >= 8 else 0)
    per_sm, fits = _sm_carveout(d, a, alloc)
    blocks = np.where(alloc > 0, per_sm // np.maximum(alloc, 1), UNLIMITED)
    return np.where(exceeded, 0, blocks), fits | exceeded


def _sm_carveout(d: Device, a: Arch, alloc: I64) -> tuple[I64, npt.NDArray[np.bool_]]:
    """The SM's shared memory for blocks of ``alloc`` bytes: its full size (the default
    preference) rounded up to a carveout, or the carveout that one block needs where larger."""
    n = len(alloc)
    if a.carveouts is None:  # before Volta, shared memory is not traded for L1
        return np.full(n, d.smem_per_sm, dtype=np.int64), np.ones(n, dtype=np.bool_)
    sizes = np.array(a.carveouts, dtype=np.int64) * KB
    pref_at = int(np.searchsorted(sizes, d.smem_per_sm))
    if pref_at == len(sizes):
        return np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.bool_)
    pref = int(sizes[pref_at])
    at = np.searchsorted(sizes, alloc)
    fits = (alloc <= pref) | (at < len(sizes))
    return np.where(alloc <= pref, pref, sizes[np.minimum(at, len(sizes) - 1)]), fits


def _blocks_per_sm(blocks: I64, sms: int) -> npt.NDArray[np.float32]:
    """Kineto's ``blocks per SM``: grid size over SMs, in single precision."""
    per_sm: npt.NDArray[np.float32] = np.maximum(blocks, 0).astype(np.float32) / np.float32(sms)
    return per_sm


def _kineto_pct(active: I64, per_sm: npt.NDArray[np.float32], threads: I64, d: Device) -> F64:
    """``(int)(0.5 + occupancy * 100.0)`` with Kineto's single-precision occupancy: resident
    blocks (no more than the grid gives each SM) times block size over the SM's thread slots."""
    resident = np.minimum(active.astype(np.float32), per_sm)
    share = resident * threads.astype(np.float32) / np.float32(d.threads_per_sm)
    pct: F64 = np.floor(0.5 + share.astype(np.float64) * 100.0)
    return pct
