"""Keep processes that only convert lean: no pandas, and Arrow memory from the C allocator.

pyarrow imports pandas (about 50 MB of RSS and 0.3 s) the first time ``pa.array`` is given
anything but a numpy array, only to ask whether it is a pandas object. A conversion never
passes one, so the CLI's convert commands let that first probe find no pandas. pyarrow
remembers the answer for that probe only: an explicit ``to_pandas()`` later still imports
pandas as usual.

pyarrow's default memory pool (mimalloc in most wheels) keeps freed memory for reuse by
later allocations of the same size class; a conversion builds and frees a chunk's columns
hundreds of times, and what the pool kept was 40 MiB of the peak RSS on the 240 MB bench
trace. glibc's malloc reuses the freed memory for whatever comes next, at the same speed.
Arrow picks its allocator once, when pyarrow loads, so the CLI asks for it before anything
imports pyarrow (``traceconv/__init__`` imports its API lazily for this). A user's
``ARROW_DEFAULT_MEMORY_POOL`` still wins; a library import changes nothing in its host.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.abc
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any


class _NoPandas(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        if fullname == "pandas" or fullname.startswith("pandas."):
            raise ImportError("pandas is not needed to convert a trace")
        return None


def skip_pandas_probe() -> None:
    if "pandas" in sys.modules:  # already paid for: nothing to save
        return
    import pyarrow as pa

    finder = _NoPandas()
    sys.meta_path.insert(0, finder)
    try:
        pa.array([0])
    finally:
        sys.meta_path.remove(finder)


def system_allocator() -> None:
    """Arrow memory from glibc's malloc, if pyarrow is not loaded yet and the user chose no pool."""
    if "pyarrow" not in sys.modules:
        os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")


def no_blas_threads() -> None:
    """No OpenBLAS thread pool, if numpy is not loaded yet and the user set no size for it.

    numpy's OpenBLAS starts a thread per core when it loads, and they spin a while waiting
    for work that a conversion never gives them: 0.12 s of CPU in every run, on a machine of
    two cores taken from the worker or the main process. traceconv does no linear algebra.
    """
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


M_TOP_PAD = -2  # glibc mallopt parameter


def keep_freed_memory(pad: int) -> None:
    """Let glibc keep up to ``pad`` bytes of freed memory instead of returning it to the OS at once.

    For a process that allocates and frees the same large amounts over and over (a worker,
    chunk after chunk): returned, the memory has to be faulted in again each time. Not glibc
    (musl, macOS): nothing to do.
    """
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).mallopt(M_TOP_PAD, pad)


def return_freed_memory() -> None:
    """Give the C heap's free pages back to the OS (glibc; elsewhere nothing to do).

    glibc returns freed memory only from the top of its heap; what the link index frees
    after linking (tens of MiB on a 1 GB trace) sits below live data and would stay in the
    process's RSS, beside the Parquet writer's memory that comes next.
    """
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)
