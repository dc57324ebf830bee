"""Small PyTorch programs with one planted problem each, and the same programs without it.

Run on the GPU machine (see `run.py` beside this file): each program is profiled by
torch.profiler (`--profiler torch`) or under Nsight Systems (`--profiler nsys`: a capture range
opened with `torch.cuda.profiler.start()` and one NVTX range `step_N` per step). `--fixed` runs
the same program without its problem: the "after" that a fix would give, the truth that the
diagnosis and the what-if predictions are checked against.

    python3 planted.py NAME --profiler torch|nsys|none --out DIR [--fixed]

Each run also writes DIR/NAME[.fixed].<profiler>.meta.json: the program's own clock of the
profiled steps (host time of each step, and CUDA events recorded at the end of each step on the
default stream: when the GPU finished it), the GPU's name and torch's version.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable

if "--fixed" in sys.argv and sys.argv[1] == "fragmentation":
    # The fix for fragmentation is an allocator setting, read once when CUDA starts.
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

DEV = "cuda" if torch.cuda.is_available() else "cpu"
DRY = DEV == "cpu"  # a dry run on a machine without a GPU: small sizes, checks the code paths
Step = Callable[[int], None]
PROGRAMS: dict[str, Callable[[argparse.Namespace], tuple[Step, int, int]]] = {}


def program(fn: Callable[[argparse.Namespace], tuple[Step, int, int]]) -> Callable[..., tuple[Step, int, int]]:
    PROGRAMS[fn.__name__] = fn
    return fn


def sync() -> None:
    if DEV == "cuda":
        torch.cuda.synchronize()


def cpu_work(ms: float) -> None:
    """Host work outside any torch operator (decoding, tokenising, augmenting in numpy)."""
    end = time.perf_counter() + ms / 1e3
    a = np.random.default_rng(0).standard_normal(4096)
    while time.perf_counter() < end:
        a = np.sqrt(np.abs(a) + 1.0)


class Tiny(nn.Module):
    """The corpus' small transformer language model (../shared/gpu/gen_traces.py)."""

    def __init__(self, d: int = 512, layers: int = 4, vocab: int = 8000) -> None:
        super().__init__()
        if DRY:
            d, layers, vocab = 64, 2, 100
        self.vocab = vocab
        self.emb = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, 8, 4 * d, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.enc(self.emb(x)))


def batch_shape(big: bool = False) -> tuple[int, int]:
    return (4, 16) if DRY else (32, 256) if big else (32, 128)


class Trainer:
    """One training step of Tiny; the programs below add their problem around it."""

    def __init__(self, precision: str = "bf16", big: bool = False) -> None:
        """big: a model whose step keeps the GPU busy under the profiler (d=1024, 8 layers, 8,192
        tokens); the default small one is launch-bound there, as any small model is."""
        torch.manual_seed(0)
        if precision == "tf32":
            torch.set_float32_matmul_precision("high")
        self.precision = precision
        self.model = (Tiny(1024, 8) if big else Tiny()).to(DEV)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        self.x = torch.randint(0, self.model.vocab, batch_shape(big), device=DEV)
        self.y = torch.randint(0, self.model.vocab, batch_shape(big), device=DEV)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.autocast(DEV, dtype=torch.bfloat16, enabled=self.precision == "bf16"):
            logits = self.model(x)
            loss = F.cross_entropy(logits.reshape(-1, self.model.vocab).float(), y.reshape(-1))
        return logits, loss

    def update(self, loss: torch.Tensor) -> None:
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)

    def step(self, x: torch.Tensor | None = None, y: torch.Tensor | None = None) -> torch.Tensor:
        logits, loss = self.forward(self.x if x is None else x, self.y if y is None else y)
        self.update(loss)
        return logits


def training(t: Trainer, warm: int, active: int) -> tuple[Step, int, int]:
    def step(i: int) -> None:
        t.step()

    return step, warm, active


# Healthy training: no finding of medium or high severity is expected.
@program
def train_bf16(a: argparse.Namespace) -> tuple[Step, int, int]:
    return training(Trainer("bf16", big=True), 5, 6)


@program
def train_tf32(a: argparse.Namespace) -> tuple[Step, int, int]:
    return training(Trainer("tf32", big=True), 5, 6)


@program
def train_fp32(a: argparse.Namespace) -> tuple[Step, int, int]:
    """PyTorch's defaults: fp32 matmuls on CUDA cores (TF32 off). Fixed: bf16 autocast."""
    return training(Trainer("bf16" if a.fixed else "fp32", big=True), 5, 6)


@program
def mlp(a: argparse.Namespace) -> tuple[Step, int, int]:
    """Six Linear(4096, 4096) on 2,048 rows, forward and backward, SGD: FLOPs known by construction.

    Matrix FLOPs a step: forward 6 GEMMs, backward 6 weight gradients and 5 input gradients
    (the input needs none): 17 x 2 x 2048 x 4096 x 4096. `--precision` fp32 (PyTorch's default,
    CUDA cores), tf32 or bf16 (autocast).
    """
    torch.manual_seed(0)
    n, rows = (64, 32) if DRY else (4096, 2048)
    if a.precision == "tf32":
        torch.set_float32_matmul_precision("high")
    layers: list[nn.Module] = []
    for k in range(6):
        layers.append(nn.Linear(n, n))
        if k < 5:
            layers.append(nn.ReLU())
    m = nn.Sequential(*layers).to(DEV)
    opt = torch.optim.SGD(m.parameters(), lr=1e-4)
    x = torch.randn(rows, n, device=DEV)

    def step(i: int) -> None:
        with torch.autocast(DEV, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            out = m(x)
        out.float().square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step, 3, 5


@program
def dataloader(a: argparse.Namespace) -> tuple[Step, int, int]:
    """A host-bound input pipeline: 25 ms of numpy work a step in the training process, before the
    batch goes to the GPU (a DataLoader with num_workers=0). Fixed: the batches are ready on the GPU."""
    t = Trainer("bf16")
    rng = np.random.default_rng(0)
    shape = batch_shape()
    ready = [(torch.randint(0, t.model.vocab, shape, device=DEV),) * 2 for _ in range(4)]

    def step(i: int) -> None:
        if a.fixed:
            x, y = ready[i % 4]
        else:
            cpu_work(25)
            tokens = rng.integers(0, t.model.vocab, size=(2, *shape))
            x, y = (torch.from_numpy(tokens[k]).to(DEV) for k in range(2))
        t.step(x, y)

    return step, 4, 6


@program
def item_sync(a: argparse.Namespace) -> tuple[Step, int, int]:
    """Logging with `.item()` every step (loss after the forward, accuracy and gradient norm after
    the update): each drains the GPU's queue, so the host's 6 ms of per-step work (tokenising the
    next batch) no longer overlaps the GPU. Fixed: the metrics are kept on the GPU."""
    t = Trainer("bf16")
    log: list[object] = []

    def step(i: int) -> None:
        cpu_work(6)
        logits, loss = t.forward(t.x, t.y)
        log.append(loss.detach() if a.fixed else loss.item())
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(t.model.parameters(), 1.0)
        t.opt.step()
        t.opt.zero_grad(set_to_none=True)
        acc = (logits.argmax(-1) == t.y).float().mean()
        if a.fixed:
            log.append((acc.detach(), gnorm.detach()))
        else:
            log.append((acc.item(), gnorm.item()))

    return step, 4, 6


class WideMlp:
    """GPU-bound steps: a bf16 MLP of six Linear(8192, 8192) on 8,192 rows, forward and backward (about
    20 TFLOP of GEMMs a step: tens of ms on an H100, a few launches), with host work of its own a step."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        n, rows, layers = (64, 32, 2) if DRY else (8192, 8192, 6)
        self.m = nn.Sequential(*[nn.Linear(n, n, bias=False) for _ in range(layers)]).to(DEV)
        self.opt = torch.optim.SGD(self.m.parameters(), lr=1e-6)
        self.x = torch.randn(rows, n, device=DEV)
        self.side = torch.randn(*((16, 16) if DRY else (2048, 2048)), device=DEV)

    def step(self, mask: torch.Tensor | None = None) -> torch.Tensor:
        with torch.autocast(DEV, dtype=torch.bfloat16):
            loss = self.m(self.x).float().square().mean()
            if mask is not None:
                loss = loss + torch.where(mask, self.side, torch.zeros_like(self.side)).mean()
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return loss


@program
def item_sync_gpu(a: argparse.Namespace) -> tuple[Step, int, int]:
    """GPU-bound steps (:class:`WideMlp`) with 8 ms of host work a step (decoding the next batch) and the
    loss read with `.item()` at the end: the sync drains the queue, so the host work no longer overlaps
    the GPU. Fixed: the loss stays on the GPU."""
    w = WideMlp()
    log: list[object] = []

    def step(i: int) -> None:
        cpu_work(8)
        loss = w.step()
        log.append(loss.detach() if a.fixed else loss.item())

    return step, 4, 6


@program
def roundtrip_gpu(a: argparse.Namespace) -> tuple[Step, int, int]:
    """GPU-bound steps (:class:`WideMlp`) with the seed's torch.where story: a mask computed in numpy from
    a 16 MB GPU tensor (to the host and 4 MB back, every step), which waits for the GPU's queue. Fixed:
    the mask is computed on the GPU."""
    w = WideMlp()

    def step(i: int) -> None:
        if a.fixed:
            mask = w.side.abs() > 0.1
        else:
            mask = torch.from_numpy(np.abs(w.side.cpu().numpy()) > 0.1).to(DEV)
        w.step(mask)

    return step, 4, 6


@program
def pageable(a: argparse.Namespace) -> tuple[Step, int, int]:
    """A CNN whose 38.5 MB image batch is copied from pageable host memory every step (a blocking,
    staged copy). Fixed: the host batches are pinned and copied with non_blocking=True."""
    torch.manual_seed(0)
    c, hw, b = (8, 32, 4) if DRY else (64, 224, 64)
    m = nn.Sequential(
        nn.Conv2d(3, c, 7, stride=2, padding=3), nn.ReLU(),
        nn.Conv2d(c, 2 * c, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(2 * c, 4 * c, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(4 * c, 8 * c, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8 * c, 1000),
    ).to(DEV)  # fmt: skip
    opt = torch.optim.SGD(m.parameters(), lr=1e-3)
    host = [torch.randn(b, 3, hw, hw) for _ in range(2)]
    if a.fixed and DEV == "cuda":
        host = [h.pin_memory() for h in host]
    labels = torch.randint(0, 1000, (b,), device=DEV)

    def step(i: int) -> None:
        x = host[i % 2].to(DEV, non_blocking=a.fixed)
        with torch.autocast(DEV, dtype=torch.bfloat16):
            loss = F.cross_entropy(m(x).float(), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step, 4, 6


@program
def roundtrip(a: argparse.Namespace) -> tuple[Step, int, int]:
    """The seed's torch.where story: a mask computed in numpy from a GPU activation (8 MB to the
    host and 2 MB back, every step). Fixed: the mask is computed on the GPU."""
    t = Trainer("bf16")
    m = t.model

    def step(i: int) -> None:
        with torch.autocast(DEV, dtype=torch.bfloat16):
            h = m.enc(m.emb(t.x))
            if a.fixed:
                keep = h.abs() > 0.1
            else:
                keep = torch.from_numpy(np.abs(h.detach().float().cpu().numpy()) > 0.1).to(DEV)
            logits = m.head(torch.where(keep, h, torch.zeros_like(h)))
            loss = F.cross_entropy(logits.reshape(-1, m.vocab).float(), t.y.reshape(-1))
        t.update(loss)

    return step, 4, 6


class Decoder(nn.Module):
    """A batch-1 decoder step: 12 blocks of attention over a fixed 1,024-token cache and an MLP,
    in bf16; the next token is the argmax of the logits, fed back without leaving the GPU."""

    def __init__(self) -> None:
        super().__init__()
        d, self.heads, blocks, vocab, ctx = (64, 4, 2, 100, 16) if DRY else (2048, 16, 12, 32000, 1024)
        self.d = d
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList()
        for _ in range(blocks):
            self.blocks.append(nn.ModuleDict({
                "ln1": nn.LayerNorm(d), "qkv": nn.Linear(d, 3 * d), "out": nn.Linear(d, d),
                "ln2": nn.LayerNorm(d), "up": nn.Linear(d, 4 * d), "down": nn.Linear(4 * d, d),
            }))  # fmt: skip
        self.head = nn.Linear(d, vocab)
        hd = d // self.heads
        self.register_buffer("k", torch.randn(blocks, 1, self.heads, ctx, hd))
        self.register_buffer("v", torch.randn(blocks, 1, self.heads, ctx, hd))

    def forward(self, tok: torch.Tensor) -> torch.Tensor:
        h = self.emb(tok)  # (1, 1, d)
        hd = self.d // self.heads
        for n, blk in enumerate(self.blocks):
            q = blk["qkv"](blk["ln1"](h))[..., : self.d].view(1, 1, self.heads, hd).transpose(1, 2)
            att = F.scaled_dot_product_attention(q, self.k[n], self.v[n])
            h = h + blk["out"](att.transpose(1, 2).reshape(1, 1, self.d))
            h = h + blk["down"](F.gelu(blk["up"](blk["ln2"](h))))
        return self.head(h).argmax(-1)


def decoder_step(graph: str) -> tuple[Step, int, int]:
    """graph: "" (eager), "outside" (captured before the profile), "inside" (in its first step)."""
    torch.manual_seed(0)
    m = Decoder().to(DEV).to(torch.bfloat16).eval()
    tok = torch.zeros(1, 1, dtype=torch.long, device=DEV)
    state: dict[str, object] = {}

    def capture() -> None:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s), torch.no_grad():
            for _ in range(3):
                m(tok)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g), torch.no_grad():
            tok.copy_(m(tok))
        state["g"] = g

    warm, active = 6, 12

    def step(i: int) -> None:
        if graph and DEV == "cuda":
            if "g" not in state and (graph == "outside" or i >= warm + 1):
                capture()
            if "g" in state:
                state["g"].replay()  # type: ignore[attr-defined]
                return
        with torch.no_grad():
            tok.copy_(m(tok))

    if graph == "outside" and DEV == "cuda":
        capture()
    return step, warm, active


@program
def decode(a: argparse.Namespace) -> tuple[Step, int, int]:
    """Launch-bound: a batch-1 decode step of ~150 small kernels, launched one by one.
    Fixed: the step captured once in a CUDA graph and replayed (`decode_graph`)."""
    return decoder_step("outside" if a.fixed else "")


@program
def decode_graph(a: argparse.Namespace) -> tuple[Step, int, int]:
    """The decoder replayed from a CUDA graph captured before the profile (healthy)."""
    return decoder_step("outside")


@program
def decode_graph_in(a: argparse.Namespace) -> tuple[Step, int, int]:
    """The decoder's CUDA graph captured inside the profile, in its first recorded step."""
    return decoder_step("inside")


@program
def tiny_gemms(a: argparse.Namespace) -> tuple[Step, int, int]:
    """A mixture-of-experts layer looped in Python: 640 separate 256x256x256 GEMMs a step beside
    four 4096^3 GEMMs (TF32). Fixed: the 640 as one batched GEMM (torch.bmm)."""
    torch.set_float32_matmul_precision("high")
    torch.manual_seed(0)
    e, n, big = (16, 16, 64) if DRY else (640, 256, 4096)
    xs = torch.randn(e, n, n, device=DEV)
    ws = torch.randn(e, n, n, device=DEV)
    w = torch.randn(big, big, device=DEV)
    h = torch.randn(big, big, device=DEV)
    acc = torch.zeros((), device=DEV)

    def step(i: int) -> None:
        nonlocal acc
        y = h
        for _ in range(4):
            y = torch.tanh(y @ w)
        if a.fixed:
            out = torch.bmm(xs, ws)
        else:
            out = torch.stack([xs[k] @ ws[k] for k in range(e)])
        acc = acc + out.mean() + y.mean()

    return step, 4, 8


@program
def leak(a: argparse.Namespace) -> tuple[Step, int, int]:
    """Training that keeps every step's logits (65 MB, bf16) "for metrics": device memory grows by
    that much each step. Fixed: only the detached loss is kept."""
    t = Trainer("bf16")
    history: list[torch.Tensor] = []

    def step(i: int) -> None:
        logits, loss = t.forward(t.x, t.y)
        t.update(loss)
        history.append(loss.detach() if a.fixed else logits)

    return step, 3, 6


@program
def fragmentation(a: argparse.Namespace) -> tuple[Step, int, int]:
    """Buffers that grow every step (8 of 128 MB + 32 MB per step), freed at its end: no cached
    block fits the next step's, so the caching allocator reserves new segments and keeps the old.
    Fixed: the same with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (set before CUDA starts)."""
    torch.set_float32_matmul_precision("high")
    w = torch.randn(2048, 2048, device=DEV)
    mb = 1 << 10 if DRY else 1 << 20

    def step(i: int) -> None:
        n = (128 + 32 * i) * mb // 4
        bufs = [torch.empty(n, device=DEV) for _ in range(8)]
        for b in bufs:
            b.fill_(1.0)
        y = w
        for _ in range(8):
            y = torch.tanh(y @ w)
        for b in bufs:
            b.add_(y.mean())
        del bufs

    return step, 3, 6


def compiled_trainer(mode: str | None, dynamic: bool | None = None) -> Trainer:
    t = Trainer("bf16")
    if mode is not None:
        t.model = torch.compile(t.model, mode=mode, dynamic=dynamic)  # type: ignore[assignment]
    return t


@program
def tx_eager(a: argparse.Namespace) -> tuple[Step, int, int]:
    """The small transformer trained eagerly (bf16 autocast): the baseline for the compiled runs."""
    return training(Trainer("bf16"), 4, 5)


@program
def tx_compile(a: argparse.Namespace) -> tuple[Step, int, int]:
    """The same transformer under torch.compile (Inductor's default mode): Triton kernels."""
    return training(compiled_trainer("default"), 4, 5)


@program
def tx_ro(a: argparse.Namespace) -> tuple[Step, int, int]:
    """torch.compile(mode="reduce-overhead"): Inductor's kernels replayed from CUDA graphs."""
    t = compiled_trainer("reduce-overhead")

    def step(i: int) -> None:
        torch.compiler.cudagraph_mark_step_begin()
        t.step()

    return step, 5, 5


@program
def tx_recompile(a: argparse.Namespace) -> tuple[Step, int, int]:
    """Recompilation every step: a compiled scoring MLP with static shapes (dynamic=False) fed
    batches whose length changes each step. Fixed: the batches padded to one length."""
    cfg = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, 256)
    torch.manual_seed(0)
    d = 64 if DRY else 1024
    m = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d), nn.LayerNorm(d)).to(DEV)
    cm = torch.compile(m, dynamic=False)
    x = torch.randn(4096, d, device=DEV)
    out: list[torch.Tensor] = []

    def step(i: int) -> None:
        n = 4096 if a.fixed else 4096 - 64 * (i + 1)
        with torch.no_grad():
            for _ in range(8):
                out.append(cm(x[:n]).sum())
        out.clear()

    return step, 2, 4


def profiled(a: argparse.Namespace, step: Step, warm: int, active: int) -> dict[str, object]:
    """Warm up, then profile `active` steps; return the program's own clock of them."""
    for i in range(warm):
        step(i)
    sync()
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(active + 1)] if DEV == "cuda" else []
    host: list[float] = []

    def timed(k: int, i: int) -> None:
        t0 = time.perf_counter()
        step(i)
        host.append(time.perf_counter() - t0)
        if ends:
            ends[k + 1].record()

    if ends:
        ends[0].record()
    if a.profiler == "torch":
        from torch.profiler import ProfilerActivity, profile, schedule

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if DEV == "cuda" else [])
        path = os.path.join(a.out, f"{a.stem}.json")
        with profile(
            activities=acts, record_shapes=True, profile_memory=True, with_flops=True,
            with_stack=a.name.startswith("tx_") and a.name != "tx_recompile",
            schedule=schedule(wait=0, warmup=1, active=active, repeat=1),
            on_trace_ready=lambda p: p.export_chrome_trace(path),
        ) as prof:  # fmt: skip
            step(warm)  # the profiler's warm-up step, not recorded
            prof.step()
            if ends:
                ends[0].record()
            for k in range(active):
                timed(k, warm + 1 + k)
                prof.step()
    elif a.profiler == "nsys":
        torch.cuda.profiler.start()
        for k in range(active):
            torch.cuda.nvtx.range_push(f"step_{k}")
            timed(k, warm + k)
            torch.cuda.nvtx.range_pop()
        sync()
        torch.cuda.profiler.stop()
    else:
        for k in range(active):
            timed(k, warm + k)
    sync()
    gpu = [ends[k].elapsed_time(ends[k + 1]) for k in range(active)] if ends else []
    return {"host_step_ms": [h * 1e3 for h in host], "gpu_step_ms": gpu}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("name", choices=sorted(PROGRAMS))
    ap.add_argument("--profiler", choices=["torch", "nsys", "none"], required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "bf16"])
    ap.add_argument("--stem", default="")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    a.stem = a.stem or a.name + (".fixed" if a.fixed else "")
    step, warm, active = PROGRAMS[a.name](a)
    t0 = time.time()
    clock = profiled(a, step, warm, active)
    meta = {
        "program": a.name, "fixed": a.fixed, "profiler": a.profiler, "precision": a.precision,
        "warm_steps": warm, "active_steps": active, "seconds": round(time.time() - t0, 2),
        "device": torch.cuda.get_device_name() if DEV == "cuda" else "cpu", "torch": torch.__version__,
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), **clock,
    }  # fmt: skip
    with open(os.path.join(a.out, f"{a.stem}.{a.profiler}.meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps({k: meta[k] for k in ("program", "fixed", "profiler", "seconds")}))


if __name__ == "__main__":
    main()
