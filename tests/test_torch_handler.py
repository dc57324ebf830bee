"""traceconv.torch.parquet_handler, run under the installed torch (CPU build) on a small model.

The traces converted here are the ones this torch really writes, so a change in torch's
trace format shows up in these tests. Expected counts come from the profiler's own JSON,
read independently with the json module.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections import Counter
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest

import traceconv

needs_torch = pytest.mark.skipif(find_spec("torch") is None, reason="torch is not installed: make dev installs it")

STEPS = 8  # schedule(wait=0, warmup=1, active=2, repeat=2): cycles end at steps 3 and 6


def _profile(handler: Any) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU())
    sched = schedule(wait=0, warmup=1, active=2, repeat=2)
    with profile(activities=[ProfilerActivity.CPU], schedule=sched, record_shapes=True, on_trace_ready=handler) as prof:
        for _ in range(STEPS):
            model(torch.randn(16, 64)).sum()
            prof.step()


def _json_categories(path: Path) -> Counter[str]:
    events = json.loads(path.read_text())["traceEvents"]
    return Counter(e.get("cat") for e in events if e.get("ph") == "X")


@pytest.mark.torch
@needs_torch
def test_one_parquet_file_per_cycle_with_every_cpu_op(tmp_path: Path) -> None:
    import traceconv.torch as tt

    handler = tt.parquet_handler(tmp_path, worker_name="w", keep_json=True)
    _profile(handler)

    assert [p.name for p in handler.written] == ["w.step3.parquet", "w.step6.parquet"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "w.step3.parquet",
        "w.step3.pt.trace.json",
        "w.step6.parquet",
        "w.step6.pt.trace.json",
    ]
    for out in handler.written:
        expected = _json_categories(out.with_name(out.stem + ".pt.trace.json"))
        df = traceconv.read_unified(out)
        ops = df[df["kind"] == "cpu_op"]
        assert expected["cpu_op"] > 0
        assert len(ops) == expected["cpu_op"]
        names = set(ops["name"].astype(str))
        assert {"aten::linear", "aten::addmm", "aten::relu"} <= names
        addmm = ops[ops["name"] == "aten::addmm"]
        # record_shapes=True: the shapes of (bias, input, weight^T, beta, alpha) survive in args
        assert [json.loads(a)["Input Dims"] for a in addmm["args"]] == [[[32], [16, 64], [64, 32], [], []]] * 2
        assert (df["trace_id"].astype(str) == out.stem).all()
        assert (ops["dur_ns"] > 0).all()
    both = traceconv.read_unified(tmp_path, kinds=["cpu_op"])
    assert both["trace_id"].astype(str).value_counts().to_dict() == {
        out.stem: len(traceconv.read_unified(out, kinds=["cpu_op"])) for out in handler.written
    }


@pytest.mark.torch
@needs_torch
def test_default_name_and_no_json_left_behind(tmp_path: Path) -> None:
    import traceconv.torch as tt

    handler = tt.parquet_handler(tmp_path / "out")
    _profile(handler)

    prefix = f"{socket.gethostname()}_{os.getpid()}"
    assert [p.name for p in handler.written] == [f"{prefix}.step3.parquet", f"{prefix}.step6.parquet"]
    assert sorted((tmp_path / "out").iterdir()) == handler.written  # no JSON, no temporary folder
    assert [r.rows for r in handler.results] == [len(traceconv.read_unified(p)) for p in handler.written]


@pytest.mark.torch
@needs_torch
def test_rank_in_name_and_rows_under_torch_distributed(tmp_path: Path) -> None:
    import torch.distributed as dist

    import traceconv.torch as tt

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        handler = tt.parquet_handler(tmp_path / "out")
        _profile(handler)
    finally:
        dist.destroy_process_group()

    assert all(p.name.split(".")[0].endswith("_rank0") for p in handler.written)
    df = traceconv.read_unified(tmp_path / "out")
    assert df["rank"].eq(0).all()


def test_import_traceconv_does_not_import_torch() -> None:
    code = "import sys, traceconv, traceconv.cli; assert 'torch' not in sys.modules, 'torch was imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_without_torch_the_import_error_says_what_to_install() -> None:
    # sys.modules['torch'] = None makes `import torch` fail as if it were not installed.
    code = "import sys; sys.modules['torch'] = None\nimport traceconv.torch"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: traceconv.torch needs PyTorch")
    assert "pip install 'traceconv[torch]'" in last
