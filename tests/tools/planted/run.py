"""Run the planted programs on the GPU machine, with both profilers, and pack what they write.

    python3 run.py OUT [--only STEM,...] [--profilers torch,nsys] [--budget SECONDS]

For each job: `planted.py` under torch.profiler, then under Nsight Systems (one process each);
each .nsys-rep is exported to SQLite, `nsys stats` writes NVIDIA's NVTX GPU projection and
kernel summary beside it, and everything is compressed with xz, in the background while the next
program runs. Nsight Systems needs the libraries of ../../../.libs (see ../shared/gpu/README.md).
"""

from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
NSYS = "/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys"
METRICS = ["--gpu-metrics-devices=0", "--gpu-metrics-frequency=2000"]
BASE = ["-t", "cuda,nvtx", "--sample=none", "--cpuctxsw=none", "--cuda-memory-usage=true", *METRICS,
        "--capture-range=cudaProfilerApi", "--capture-range-end=stop", "--force-overwrite", "true"]  # fmt: skip
SHAPES = ["--pytorch=autograd-shapes-nvtx"]
NODE = ["--cuda-graph-trace=node"]

# (stem, program, planted.py flags, extra nsys flags), most needed first: the run stops at its budget
JOBS: list[tuple[str, str, list[str], list[str]]] = [
    ("train_bf16", "train_bf16", [], SHAPES),
    ("dataloader", "dataloader", [], []),
    ("dataloader.fixed", "dataloader", ["--fixed"], []),
    ("item_sync", "item_sync", [], []),
    ("item_sync.fixed", "item_sync", ["--fixed"], []),
    ("decode", "decode", [], []),
    ("decode_graph", "decode_graph", [], []),
    ("roundtrip", "roundtrip", [], []),
    ("roundtrip.fixed", "roundtrip", ["--fixed"], []),
    ("pageable", "pageable", [], []),
    ("pageable.fixed", "pageable", ["--fixed"], []),
    ("tiny_gemms", "tiny_gemms", [], []),
    ("tiny_gemms.fixed", "tiny_gemms", ["--fixed"], []),
    ("leak", "leak", [], []),
    ("fragmentation", "fragmentation", [], []),
    ("mlp_fp32", "mlp", ["--precision", "fp32"], SHAPES),
    ("mlp_bf16", "mlp", ["--precision", "bf16"], SHAPES),
    ("train_fp32", "train_fp32", [], SHAPES),
    ("decode_graph_node", "decode_graph", [], NODE),
    ("train_tf32", "train_tf32", [], []),
    ("mlp_tf32", "mlp", ["--precision", "tf32"], SHAPES),
    ("leak.fixed", "leak", ["--fixed"], []),
    ("fragmentation.fixed", "fragmentation", ["--fixed"], []),
    ("decode_graph_in", "decode_graph_in", [], []),
    ("decode_graph_in_node", "decode_graph_in", [], [*SHAPES, *NODE]),
    ("decode_graph_in_whole", "decode_graph_in", [], SHAPES),
    ("tx_eager", "tx_eager", [], []),
    ("tx_compile", "tx_compile", [], []),
    ("tx_ro", "tx_ro", [], []),
    ("tx_ro_node", "tx_ro", [], NODE),
    ("tx_recompile", "tx_recompile", [], []),
    ("tx_recompile.fixed", "tx_recompile", ["--fixed"], []),
    ("item_sync_gpu", "item_sync_gpu", [], []),
    ("item_sync_gpu.fixed", "item_sync_gpu", ["--fixed"], []),
    ("roundtrip_gpu", "roundtrip_gpu", [], []),
    ("roundtrip_gpu.fixed", "roundtrip_gpu", ["--fixed"], []),
    ("dataloader_shapes", "dataloader", [], SHAPES),
    ("dataloader_shapes.fixed", "dataloader", ["--fixed"], SHAPES),
]


def sh(cmd: list[str], log: str, env: dict[str, str] | None = None, timeout: float = 180) -> int:
    with open(log, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        try:
            return subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            f.write("TIMEOUT\n")
            return 124
        except OSError as e:
            f.write(f"FAILED {e}\n")
            return 127


def finish_nsys(rep: str, work: str, stem: str, log: str) -> subprocess.Popen[bytes]:
    """Export, stats and compression of one report, in the background."""
    db = f"{work}/{stem}.sqlite"
    script = (
        f"{NSYS} export --type sqlite --force-overwrite true -o {db} {rep} && "
        f"{NSYS} stats --report nvtx_gpu_proj_trace,cuda_gpu_kern_sum,nvtx_sum --format csv "
        f"--force-export false -o {work}/{stem} {db}; "
        f"xz -T2 -6 -f {db}; for c in {work}/{stem}_*.csv; do xz -T1 -6 -f $c; done"
    )
    with open(log, "a") as f:
        f.write(f"$ (background) {script}\n")
    return subprocess.Popen(["bash", "-c", script + f" >> {log}.{stem} 2>&1"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--only", default="")
    ap.add_argument("--profilers", default="torch,nsys")
    ap.add_argument("--budget", type=float, default=540)
    a = ap.parse_args()
    t0 = time.time()
    work = "/tmp/planted"
    for d in (f"{work}/torch", f"{work}/nsys", f"{work}/rep"):
        os.makedirs(d, exist_ok=True)
    log = f"{a.out}/run.log"
    env = dict(os.environ, LD_LIBRARY_PATH="/tmp/dw/usr/lib/x86_64-linux-gnu", PYTHONUNBUFFERED="1")
    only = [s for s in a.only.split(",") if s]
    by_stem = {j[0]: j for j in JOBS}
    jobs = [by_stem[s] for s in only] if only else JOBS  # in the order asked
    bg: list[subprocess.Popen[bytes]] = []
    planted = os.path.join(HERE, "planted.py")
    base = list(BASE)
    for prof in a.profilers.split(","):  # every program under one profiler, then the other
        for stem, prog, flags, extra in jobs:
            if time.time() - t0 > a.budget:
                with open(log, "a") as f:
                    f.write(f"SKIPPED (budget) {stem} {prof}\n")
                continue
            t = time.time()
            if prof == "torch":
                cmd = [sys.executable, planted, prog, "--profiler", "torch", "--out", f"{work}/torch",
                       "--stem", stem, *flags]  # fmt: skip
                rc = sh(cmd, log, env)
            else:
                rep = f"{work}/rep/{stem}"
                tail = ["-o", rep, sys.executable, planted, prog, "--profiler", "nsys", "--out", f"{work}/nsys",
                        "--stem", stem, *flags]  # fmt: skip
                rc = sh([NSYS, "profile", *base, *extra, *tail], log, env)
                if rc != 0 and METRICS[0] in base:
                    # GPU metrics need a privilege some machines lack: the rest goes on without them
                    base = [o for o in base if o not in METRICS]
                    rc = sh([NSYS, "profile", *base, *extra, *tail], log, env)
                if rc == 0 and os.path.exists(rep + ".nsys-rep"):
                    bg.append(finish_nsys(rep + ".nsys-rep", f"{work}/nsys", stem, log))
            with open(log, "a") as f:
                f.write(f"== {stem} {prof} rc={rc} {time.time() - t:.1f}s (at {time.time() - t0:.0f}s)\n")
    for p in bg:
        p.wait()
    for name in ("torch", "nsys"):
        files = glob.glob(f"{work}/{name}/*")
        if name == "torch":
            subprocess.run(["xz", "-T0", "-6", "-f", *[f for f in files if f.endswith(".json")
                                                        and not f.endswith(".meta.json")]])  # fmt: skip
        subprocess.run(["tar", "cf", f"{a.out}/{name}.tar", "-C", f"{work}/{name}", "."])
    subprocess.run(["bash", "-c", f"cat {log}.* >> {log} 2>/dev/null; ls -la {work}/* >> {log}"])
    print(f"done in {time.time() - t0:.0f}s")


if __name__ == "__main__":
    main()
