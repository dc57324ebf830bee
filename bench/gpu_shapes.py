"""Large real traces of other shapes than big_train, for `make bench` (run on a GPU machine).

    python3 gpu_shapes.py OUTDIR BIG2_STEPS BIG3_STEPS      # 1200 40: what bench/README.md lists

big2: a conv net with Python stacks and memory events (``gen_traces.big2`` of ../shared/gpu,
      which must sit beside this file).
big3: a transformer encoder trained with record_shapes, with_stack, profile_memory and
      with_flops, written by tensorboard_trace_handler (gzip), one profiler cycle.
"""

from __future__ import annotations

import os
import sys
import time

import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_traces  # copied beside this file from ../shared/gpu

VOCAB = 16000


def big3(out: str, steps: int) -> None:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048, batch_first=True)
    encoder = nn.TransformerEncoder(layer, num_layers=6)
    model = nn.Sequential(nn.Embedding(VOCAB, 512), encoder, nn.Linear(512, VOCAB)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step() -> None:
        x = torch.randint(0, VOCAB, (8, 256), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(x).reshape(-1, VOCAB).float(), x.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    handler = tensorboard_trace_handler(f"{out}/big3", worker_name="transformer", use_gzip=True)
    with profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
        record_shapes=True,
        with_stack=True,
        profile_memory=True,
        with_flops=True,
        schedule=schedule(wait=0, warmup=1, active=steps, repeat=1),
        on_trace_ready=handler,
    ) as prof:
        for i in range(steps + 1):
            with record_function(f"step{i}"):
                step()
            prof.step()
    torch.cuda.synchronize()


def main() -> None:
    out, big2_steps, big3_steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    os.makedirs(out, exist_ok=True)
    t = time.time()
    gen_traces.big2(out, big2_steps)
    print(f"big2 {time.time() - t:.1f}s", flush=True)
    t = time.time()
    big3(out, big3_steps)
    print(f"big3 {time.time() - t:.1f}s", flush=True)


if __name__ == "__main__":
    main()
