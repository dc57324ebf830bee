"""Large real traces of other shapes than big_train, for `make bench` (run on a GPU machine, see bench/README.md).

big2: conv net with Python stacks and memory events (gen_traces.big2).
big3: a transformer encoder trained with record_shapes, with_stack, profile_memory, with_flops,
      written by tensorboard_trace_handler (gzip), one cycle.
"""

import os, sys, time

sys.path.insert(0, os.path.dirname(__file__))
import torch, torch.nn as nn
from torch.profiler import profile, record_function, ProfilerActivity, schedule, tensorboard_trace_handler
import gen_traces

out = sys.argv[1]
big2_steps = int(sys.argv[2])
big3_steps = int(sys.argv[3])
os.makedirs(out, exist_ok=True)
t = time.time()
gen_traces.big2(out, big2_steps)
print(f"big2 {time.time() - t:.1f}s", flush=True)

torch.manual_seed(0)
layer = nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048, batch_first=True)
model = nn.Sequential(
    nn.Embedding(16000, 512), nn.TransformerEncoder(layer, num_layers=6), nn.Linear(512, 16000)
).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)


def step():
    x = torch.randint(0, 16000, (8, 256), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = nn.functional.cross_entropy(model(x).reshape(-1, 16000).float(), x.reshape(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


for _ in range(3):
    step()
t = time.time()
with profile(
    activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
    record_shapes=True,
    with_stack=True,
    profile_memory=True,
    with_flops=True,
    schedule=schedule(wait=0, warmup=1, active=big3_steps, repeat=1),
    on_trace_ready=tensorboard_trace_handler(f"{out}/big3", worker_name="transformer", use_gzip=True),
) as prof:
    for i in range(big3_steps + 1):
        with record_function(f"step{i}"):
            step()
        prof.step()
torch.cuda.synchronize()
print(f"big3 {time.time() - t:.1f}s", flush=True)
