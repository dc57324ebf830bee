"""Occupancy of every kernel: CUDA's occupancy calculator on the launch configuration and the
device's limits, for PyTorch traces (``deviceProperties``) and Nsight Systems exports
(``TARGET_INFO_GPU``).

On real PyTorch traces ``est_occupancy_pct`` must be Kineto's own ``est. achieved occupancy %``
(to its rounding) wherever Kineto's figure is right, and above 0 for kernels with more than
48 KB of shared memory per block, for which Kineto writes 0.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import traceconv
from traceconv.readers import occupancy_columns
from traceconv.readers.occupancy import LIMITERS, Device, calculate
from traceconv.readers.occupancy_columns import KINETO_NO_OPT_IN, Devices

from .conftest import fixture, param_path, real_files

TRACES = real_files("pytorch", ("*.json", "*.json.gz"))
EXPORTS = real_files("nsys", ("*.sqlite",))
DEFAULT_SMEM = 48 * 1024
CONFIG = ["block_x", "block_y", "block_z", "grid_x", "grid_y", "grid_z", "registers_per_thread", "shared_memory_bytes"]
OCCUPANCY = ["theoretical_occupancy_pct", "est_occupancy_pct", "occupancy_limiter", "occupancy_vs_kineto"]


@cache
def _converted(path: Path) -> pa.Table:
    return traceconv.read(path)


def kernels(path: Path) -> pd.DataFrame:
    df = _converted(path).to_pandas()
    return df[df["kind"] == "kernel"].reset_index(drop=True)


def _with_figures(path: Path) -> pd.DataFrame:
    """Kernels that have both Kineto's figure and ours (the trace has device properties)."""
    k = kernels(path)
    return k[k["occupancy_pct"].notna() & k["est_occupancy_pct"].notna()]


# -- PyTorch traces against Kineto's own figure ------------------------------------------


@pytest.mark.parametrize("item", TRACES, ids=lambda p: param_path(p).name)
def test_est_is_kinetos_figure_up_to_its_rounding(item: Any) -> None:
    """Every kernel of at most 48 KB of shared memory: within 0.5 of Kineto's whole percent
    (exactly 0.5 where ours is x.5, which Kineto rounds up), and the same figure once rounded as
    Kineto rounds (occupancy_vs_kineto null). The corpus spans V100, A100, H100/H200 and B200."""
    k = _with_figures(param_path(item))
    small = k[k["shared_memory_bytes"] <= DEFAULT_SMEM]
    if small.empty:
        pytest.skip("no kernel with both Kineto's occupancy and device properties")
    off = small[(small["est_occupancy_pct"] - small["occupancy_pct"]).abs() > 0.5]
    assert off.empty, off[["name", *CONFIG, "occupancy_pct", "est_occupancy_pct"]].head().to_string()
    assert small["occupancy_vs_kineto"].isna().all()


@pytest.mark.sweep  # over every real file, as the sweep it vouches for
def test_the_sweep_covers_every_architecture_and_many_kernels() -> None:
    """The test above checks kernels of compute capability 7.0, 8.0, 9.0 and 10.0 (else it proves little)."""
    majors: set[int] = set()
    checked = 0
    for item in TRACES:
        path = param_path(item)
        k = _with_figures(path)
        checked += int((k["shared_memory_bytes"] <= DEFAULT_SMEM).sum())
        if len(k):
            majors |= {d["computeMajor"] for d in _device_properties(path)}
    assert {7, 8, 9, 10} <= majors and checked > 20_000, (majors, checked)


def _device_properties(path: Path) -> list[dict[str, Any]]:
    meta = _converted(path).schema.metadata
    props = json.loads(meta[b"traceconv.trace"]).get("deviceProperties") if meta else None
    return props if isinstance(props, list) else []


@pytest.mark.parametrize("item", TRACES, ids=lambda p: param_path(p).name)
def test_kernels_over_48kb_get_their_opt_in_figure(item: Any) -> None:
    """Kineto writes 0 for them; ours is above 0 (every one was launched, on a grid of at least
    one block), and the column says why the figures differ where they do."""
    k = _with_figures(param_path(item))
    big = k[k["shared_memory_bytes"] > DEFAULT_SMEM]
    if big.empty:
        pytest.skip("no kernel over 48 KB with Kineto's occupancy")
    assert (big["occupancy_pct"] == 0).all()
    assert (big["est_occupancy_pct"] > 0).all()
    rounded = np.floor(big["est_occupancy_pct"] + 0.5)  # as Kineto writes a figure
    assert (big["occupancy_vs_kineto"] == KINETO_NO_OPT_IN).tolist() == (rounded > 0).tolist()


def test_occ_smem_trace_figures_worked_by_hand() -> None:
    """The H200 trace made for this (fixtures/pytorch/h200-extra/README.md): the flash-attention
    forward kernel (384 threads, 168 registers, 232,448 B of shared memory, 132 blocks) fits once
    per SM (registers: 3 warps of 5,376 registers per sub-partition = 12 warps = 1 block; shared
    memory: 232,448 + 1,024 reserved = the SM's 233,472 B), so 12 of 64 warps: 18.75%, and the grid
    gives each of the 132 SMs one block: 384 of 2,048 threads, 18.75%. The sgemm at exactly 48 KB
    still fits the default limit (49,152 + 1,024 reserved = 50,176 B) and Kineto's 12 is ours too."""
    k = kernels(fixture("pytorch/h200-extra/occ_smem.json"))
    fprop = k[k["name"].astype(str).str.contains("flash_fprop")]
    assert len(fprop) == 3
    assert fprop["theoretical_occupancy_pct"].tolist() == [18.75] * 3
    assert fprop["est_occupancy_pct"].tolist() == [18.75] * 3
    assert fprop["occupancy_pct"].tolist() == [0.0] * 3
    assert set(fprop["occupancy_limiter"]) == {"registers"}  # shared memory binds alike: registers are named first
    sgemm = k[k["shared_memory_bytes"] == DEFAULT_SMEM]
    assert len(sgemm) == 3 and (sgemm["occupancy_pct"] == 12).all()
    assert np.allclose(sgemm["est_occupancy_pct"], 128 / 132 * 256 / 2048 * 100)
    assert set(sgemm["occupancy_limiter"]) == {"grid"}


@pytest.mark.parametrize(
    "name", ["trace_filter_sampled_rank-0", "mi300_resnet_act_checkpoint", "resnet50_profiler_api"]
)
def test_no_device_properties_no_figures(name: str) -> None:
    """Kernels of a trace without (CUDA) device properties get nulls, not a guess: no
    ``deviceProperties`` at all, AMD's (no register or per-SM shared memory limits)."""
    (path,) = [param_path(p) for p in TRACES if name in param_path(p).name]
    k = kernels(path)
    assert len(k) and k[OCCUPANCY].isna().all().all()


# -- the calculator, by hand ---------------------------------------------------------------

# Device limits as the corpus traces report them (deviceProperties / TARGET_INFO_GPU).
V100 = Device(7, 0, 80, 32, 2048, 1024, 65536, 65536, 98304, 49152, 98304)
T4 = Device(7, 5, 40, 32, 1024, 1024, 65536, 65536, 65536, 49152, 65536, 16)
A100 = Device(8, 0, 108, 32, 2048, 1024, 65536, 65536, 167936, 49152, 166912)
H200 = Device(9, 0, 132, 32, 2048, 1024, 65536, 65536, 233472, 49152, 232448)

# (device, threads, registers, shared memory, grid blocks) -> (theoretical %, est %, Kineto's %, limiter)
HAND = [
    # sm_70. 6 warps of 40 registers: 1,280 a warp; 16,384 per sub-partition hold 12 warps, so 48
    # warps = 8 blocks (warp slots: 10, shared memory 3,072 B rounded to 256: 32); 48 of 64 warps.
    # The grid gives each of 80 SMs half a block: 0.5 x 192 / 2048 = 4.6875%, Kineto 5.
    (V100, 192, 40, 3000, 40, 75.0, 4.6875, 5.0, "grid"),
    # sm_70: 32 warps of 128 registers need 131,072 > the 65,536 a block may have: it cannot run.
    (V100, 1024, 128, 0, 80, 0.0, 0.0, 0.0, "registers"),
    # sm_75: one-warp blocks; Turing holds 16 blocks an SM: 16 of 32 warps.
    (T4, 32, 16, 0, 4000, 50.0, 50.0, 50.0, "blocks"),
    # sm_80. 8 warps of 64 registers: 2,048 a warp, 8 warps a sub-partition = 32 warps = 4 blocks;
    # shared memory (16,384 + 1,024 reserved) would allow 9. 32 of 64 warps; the grid (9.26 a SM) fills them.
    (A100, 256, 64, 16384, 1000, 50.0, 50.0, 50.0, "registers"),
    # sm_80 with opt-in: 98,304 + 1,024 B a block over the default 48 KB (Kineto: cannot run, 0);
    # the opt-in 163 KB limit takes it, the SM's 164 KB hold one block: 4 of 64 warps.
    (A100, 128, 128, 98304, 216, 6.25, 6.25, 0.0, "shared_memory"),
    # sm_90. 4 warps of 32 registers: 16 blocks by registers and by warp slots alike, so the warp
    # slots are named; 64 of 64 warps, and the grid gives 16 blocks to each SM.
    (H200, 128, 32, 0, 132 * 16, 100.0, 100.0, 100.0, "block_size"),
    # sm_90: 33 threads take 2 warps: 32 blocks (the SM's cap and its warp slots) = 64 warps, 100%
    # theoretical; Kineto counts threads: 32 x 33 / 2048 = 51.5625%.
    (H200, 33, 16, 0, 132 * 32, 100.0, 51.5625, 52.0, "block_size"),
    # sm_90: the 1,024 B the driver reserves in each block count: 45 KB + 1 KB fits 4 times in the
    # SM's 228 KB (45 KB alone would fit 5 times): 4 one-warp blocks, 4 of 64 warps. Kineto: int(6.75).
    (H200, 32, 16, 46080, 132 * 8, 6.25, 6.25, 6.0, "shared_memory"),
    # sm_90: 87,568 B of shared memory (opt-in; + 1,024 reserved, rounded to 128: 88,704) twice in
    # the SM's 233,472: 2 blocks of 3 warps, 6 of 64. One block on 132 SMs is 96 / 132 / 2048 of the
    # threads, a fraction of a percent (Kineto writes 0). An NCCL kernel of the corpus' A100 trace.
    (H200, 96, 96, 87568, 1, 9.375, 96 / 132 / 2048 * 100, 0.0, "grid"),
]


@pytest.mark.parametrize(("device", "threads", "regs", "smem", "blocks", "theo", "est", "kineto", "limiter"), HAND)
def test_calculator_by_hand(
    device: Device,
    threads: int,
    regs: int,
    smem: int,
    blocks: int,
    theo: float,
    est: float,
    kineto: float,
    limiter: str,
) -> None:
    r = calculate(device, *(np.array([v], dtype=np.int64) for v in (threads, regs, smem, blocks)))
    assert r.theoretical_pct[0] == pytest.approx(theo)
    assert r.est_pct[0] == pytest.approx(est)
    assert r.kineto_pct[0] == kineto
    assert LIMITERS[r.limiter[0]] == limiter


def test_no_grid_no_estimate() -> None:
    r = calculate(H200, *(np.array([v], dtype=np.int64) for v in (256, 32, 0, -1)))
    assert r.theoretical_pct[0] == 100.0 and np.isnan(r.est_pct[0]) and LIMITERS[r.limiter[0]] == "block_size"


def test_unknown_compute_capability_gets_nothing() -> None:
    r = calculate(Device(12, 0, 170, 32, 1536, 1024, 65536, 65536, 102400, 49152, 101376), *(np.ones(1, np.int64),) * 4)
    assert np.isnan(r.theoretical_pct).all() and (r.limiter == -1).all()


# -- Nsight Systems exports ----------------------------------------------------------------


@pytest.mark.parametrize("item", EXPORTS, ids=lambda p: param_path(p).name)
def test_nsys_kernels_have_figures_in_range(item: Any) -> None:
    """Kernels of exports that describe their GPUs get figures, between 0 and 100, the estimate
    never above the theoretical figure; exports that do not (no TARGET_INFO_GPU limits) get nulls."""
    path = param_path(item)
    k = kernels(path)
    if k.empty:
        pytest.skip("no kernels")
    theo, est = k["theoretical_occupancy_pct"], k["est_occupancy_pct"]
    assert k["occupancy_vs_kineto"].isna().all()
    if path.name.startswith(("GindaChen__nsys-ai__mfu_2gpu_before", "GindaChen__nsys-ai__healthy")):
        assert k[OCCUPANCY].isna().all().all()  # no TARGET_INFO_GPU, or one with ids and names only
        return
    assert theo.notna().all() and est.notna().all() and k["occupancy_limiter"].notna().all()
    assert ((est >= 0) & (est <= 100) & (theo <= 100)).all()
    assert (est <= theo + 1e-9).all()


@pytest.mark.parametrize(
    ("export", "trace"),
    [
        ("nsys/h200/buggy.sqlite", "pytorch/h200/train_buggy.pt.trace.json.gz"),
        ("nsys/h200/fixed.sqlite", "pytorch/h200/train_fixed.pt.trace.json.gz"),
    ],
)
def test_nsys_agrees_with_pytorch_for_the_same_configurations(export: str, trace: str) -> None:
    """The same training loop on the same H200 under Nsight Systems and under torch.profiler:
    for every launch configuration both ran, the export's figures (from TARGET_INFO_GPU) are the
    trace's (from deviceProperties), and within 0.5 of Kineto's own figure up to 48 KB."""
    by_config = {
        "theo": ("theoretical_occupancy_pct", "unique"),
        "est": ("est_occupancy_pct", "unique"),
        "kineto": ("occupancy_pct", "unique"),
    }
    n = kernels(fixture(export)).groupby(CONFIG).agg(**by_config)
    t = kernels(fixture(trace)).groupby(CONFIG).agg(**by_config)
    both = n.merge(t, left_index=True, right_index=True, suffixes=("_nsys", "_torch"))
    assert len(both) >= 60
    for _, row in both.iterrows():
        assert len(row["est_nsys"]) == 1 and list(row["est_nsys"]) == list(row["est_torch"])
        assert list(row["theo_nsys"]) == list(row["theo_torch"])
    small = both.index.get_level_values("shared_memory_bytes") <= DEFAULT_SMEM
    for _, row in both[small].iterrows():
        assert abs(row["est_nsys"][0] - row["kineto_torch"][0]) <= 0.5
    assert (both[~small]["est_nsys"].map(lambda v: v[0]) > 0).all() and (~small).sum() >= 3


def test_nsys_devices_matched_by_id_only_where_the_export_says_so() -> None:
    """Hand-made rows (from the corpus' A100 and H200 TARGET_INFO_GPU rows: no real export has
    two kinds of GPU): with different limits, a kernel's device is taken as a GPU id only when
    TARGET_INFO_CUDA_DEVICE says GPU and CUDA ids agree; with the same limits, id does not matter."""
    h200 = dict(id=0, computeMajor=9, computeMinor=0, smCount=132, threadsPerWarp=32, maxWarpsPerSm=64)
    h200 |= dict(maxThreadsPerBlock=1024, maxRegistersPerSm=65536, maxRegistersPerBlock=65536)
    h200 |= dict(maxShmemPerSm=233472, maxShmemPerBlock=49152, maxShmemPerBlockOptin=232448, maxBlocksPerSm=32)
    a100 = h200 | dict(id=1, computeMinor=0, computeMajor=8, smCount=108, maxShmemPerSm=167936)
    a100 |= dict(maxShmemPerBlockOptin=166912)
    assert Devices.nsys([h200, a100], same_ids=False) == Devices({})
    matched = Devices.nsys([h200, a100], same_ids=True)
    assert matched.by_id[0].sms == 132 and matched.by_id[1].sms == 108
    assert Devices.nsys([h200, h200 | {"id": 1}], same_ids=False).every == matched.by_id[0]
    render_driver = {k: 0 for k in h200} | {"id": 1}  # a real row of Faraz-Nasir's export: not a CUDA GPU
    assert Devices.nsys([h200, render_driver], same_ids=False).every == matched.by_id[0]


def test_kernels_find_their_device_by_id() -> None:
    """Hand-made: devices 0 and 2 described, kernels on 0, 1 (not described), 2 and none."""
    devices = Devices({0: H200, 2: A100})
    listed, at = devices.lookup(np.array([0, 1, 2, -1, 7], dtype=np.int64))
    assert [listed[i] if i >= 0 else None for i in at] == [H200, None, A100, None, None]
    kineto = Devices.kineto([{"id": 1, **_KINETO_H200}, {"id": 0, **_KINETO_H200, "numSms": 8}])
    assert kineto.by_id[1] == H200 and kineto.by_id[0].sms == 8


# deviceProperties of the corpus' H200 traces, as Kineto writes them (less name and memory size).
_KINETO_H200 = dict(computeMajor=9, computeMinor=0, maxThreadsPerBlock=1024, maxThreadsPerMultiprocessor=2048)
_KINETO_H200 |= dict(regsPerBlock=65536, warpSize=32, sharedMemPerBlock=49152, numSms=132, regsPerMultiprocessor=65536)
_KINETO_H200 |= dict(sharedMemPerBlockOptin=232448, sharedMemPerMultiprocessor=233472)


# -- cost ----------------------------------------------------------------------------------


def test_computed_once_per_distinct_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    """The calculator sees each (device, configuration) of a row group once, not each kernel."""
    calls: list[list[tuple[int, ...]]] = []
    real = occupancy_columns.fit

    def counting(device: Device, *config: Any) -> Any:
        calls.append(list(zip(*(c.tolist() for c in config), strict=True)))
        return real(device, *config)

    monkeypatch.setattr(occupancy_columns, "fit", counting)
    k = traceconv.read(fixture("pytorch/h200/train_buggy.pt.trace.json.gz")).to_pandas()
    launched = int((k["kind"] == "kernel").sum())
    assert calls and all(len(set(call)) == len(call) for call in calls)
    assert sum(map(len, calls)) < launched / 5, (sum(map(len, calls)), launched)
