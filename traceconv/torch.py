"""Straight from the profiler: an ``on_trace_ready`` handler that writes unified Parquet.

Use it where you would use ``torch.profiler.tensorboard_trace_handler``::

    from torch.profiler import profile, schedule
    import traceconv.torch

    with profile(schedule=schedule(wait=1, warmup=1, active=3),
                 on_trace_ready=traceconv.torch.parquet_handler("out/")) as prof:
        for batch in loader:
            train_step(batch)
            prof.step()

    df = traceconv.read_unified("out/")   # every cycle of every rank, one DataFrame

Each call exports the profiler's Chrome trace to a temporary file beside the output,
converts it with :func:`traceconv.convert` and removes the JSON again.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

try:
    import torch
except ImportError as exc:  # torch is an optional extra: say how to get it, once, here
    raise ImportError(
        "traceconv.torch needs PyTorch, which is not installed; install it with "
        "`pip install 'traceconv[torch]'` (or pip install torch)"
    ) from exc

from traceconv.errors import TraceconvError
from traceconv.writing import WriteResult, convert

__all__ = ["ParquetHandler", "default_worker_name", "parquet_handler"]


def default_worker_name() -> str:
    """``host_pid`` as tensorboard_trace_handler names its files, plus ``_rankN`` under torch.distributed."""
    name = f"{socket.gethostname()}_{os.getpid()}"
    dist = getattr(torch, "distributed", None)
    if dist is not None and dist.is_available() and dist.is_initialized():
        name += f"_rank{dist.get_rank()}"
    return name


class ParquetHandler:
    """The callable returned by :func:`parquet_handler`; ``written`` lists every file it wrote, in order."""

    def __init__(
        self, dir_name: str | os.PathLike[str], worker_name: str | None = None, keep_json: bool = False
    ) -> None:
        self.dir = Path(dir_name)
        self.worker_name = worker_name
        self.keep_json = keep_json
        self.written: list[Path] = []
        self.results: list[WriteResult] = []

    def __call__(self, prof: Any) -> Path:
        """Export, convert and return the path of ``<dir>/<worker>.step<N>.parquet``."""
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.worker_name is None:
            # Resolved at the first trace, not at construction: the handler is usually made
            # before torch.distributed is initialised.
            self.worker_name = default_worker_name()
        stem = f"{self.worker_name}.step{getattr(prof, 'step_num', len(self.written))}"
        out = self.dir / f"{stem}.parquet"
        if out.exists():  # a second profiler in this process, restarting its step count
            stem = f"{stem}.{time.time_ns()}"
            out = self.dir / f"{stem}.parquet"
        # The JSON's name becomes the rows' trace_id; the hidden folder keeps it on the
        # output's file system and out of `read_unified(dir)`.
        tmp_dir = Path(tempfile.mkdtemp(prefix=".traceconv-", dir=self.dir))
        trace = tmp_dir / f"{stem}.pt.trace.json"
        try:
            prof.export_chrome_trace(str(trace))
            # In one process: never fork a training process (CUDA contexts, NCCL threads, and
            # an address space that fork would have to copy the page tables of).
            result = convert(trace, out, workers=0)
            if self.keep_json:
                self._keep(trace)
        except TraceconvError as exc:
            kept = self._keep(trace)
            raise type(exc)(
                kept,
                f"could not be converted ({exc.message})",
                f"the profiler's trace was kept there; convert it with `traceconv ingest {kept}` "
                "once the problem is fixed",
            ) from exc
        finally:
            shutil.rmtree(tmp_dir, ignore_errors=True)
        self.written.append(out)
        self.results.append(result)
        return out

    def _keep(self, trace: Path) -> Path:
        """Move a trace that failed to convert next to the outputs so the profile is not lost."""
        kept = self.dir / trace.name
        if trace.exists():
            os.replace(trace, kept)
        return kept


def parquet_handler(
    dir_name: str | os.PathLike[str], worker_name: str | None = None, keep_json: bool = False
) -> ParquetHandler:
    """An ``on_trace_ready`` handler writing one unified Parquet file per profiling cycle.

    Files are named ``<worker_name>.step<N>.parquet``, ``N`` being the profiler's step
    number when the cycle's trace was ready. ``worker_name`` defaults to ``host_pid``
    (``host_pid_rankR`` when torch.distributed is initialised). Read the whole folder
    with ``traceconv.read_unified(dir_name)``.

    ``keep_json=True`` also keeps the Chrome trace as ``<dir>/<same stem>.pt.trace.json``
    (for TensorBoard or Perfetto). Use it rather than chaining this handler with
    ``tensorboard_trace_handler``: a second ``export_chrome_trace`` of the same cycle
    crashes the process (segmentation fault, seen with torch 2.13).

    Example::

        profile(schedule=schedule(wait=1, warmup=1, active=3, repeat=2),
                on_trace_ready=traceconv.torch.parquet_handler("out/"))
    """
    return ParquetHandler(dir_name, worker_name, keep_json)
