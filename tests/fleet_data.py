"""Real traces for the fleet tests: a directory of 40, as a run of many ranks and cycles writes."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import traceconv

from .fixtures import fixture

# Ten small real traces (ranks 0 and 1 from DDP and HTA's sampled pair, the rest without a rank),
# four copies each, named copyN_<name>: 40 inputs of three partitions.
SMALL = [
    "pytorch/h200/ddp_rank0.pt.trace.json",
    "pytorch/h200/ddp_rank1.pt.trace.json",
    "pytorch/h200/seed_linear.json",
    "pytorch/h200/streams_memcpy.json",
    "pytorch/h200/cuda_graph.json",
    "pytorch/h200/conv_nvtx_stack.json",
    "pytorch/public/facebookresearch__HolisticTraceAnalysis__tests_data_trace_filter_sampled_rank-0.json.gz",
    "pytorch/public/facebookresearch__HolisticTraceAnalysis__tests_data_trace_filter_sampled_rank-1.json.gz",
    "pytorch/public/facebookresearch__HolisticTraceAnalysis__tests_data_triton_example_triton_example.json.gz",
    "pytorch/public/facebookresearch__HolisticTraceAnalysis__tests_data_trace_file_list_inference_rank_1.json.gz",
]


def traces(folder: Path, copies: int = 4, names: list[str] | None = None) -> Path:
    folder.mkdir(parents=True)
    for i in range(copies):
        for rel in names or SMALL:
            src = fixture(rel)
            shutil.copy(src, folder / f"copy{i}_{src.name}")
    return folder


def ingest(
    *args: str | Path, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "traceconv.cli", "ingest", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def input_kinds(folder: Path) -> Counter[str]:
    """Rows per kind of every trace in ``folder``, converted in memory one by one."""
    counts: Counter[str] = Counter()
    for path in sorted(folder.iterdir()):
        kinds = traceconv.read(path)["kind"].to_pylist()
        counts.update(kinds)
    return counts


def parts(root: Path) -> dict[str, bytes]:
    """Every file of a dataset by its path inside it."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
