"""Process-wide switches, behind one boundary that the command line owns.

A conversion is faster and leaner with a few settings that change the whole process:
Arrow memory from glibc's ``malloc`` instead of pyarrow's pool, no OpenBLAS thread pool,
no cyclic garbage collection while millions of short-lived objects are made (nor while the
command imports its modules), freed C heap
pages given back to the OS, no pandas import for pyarrow's first probe, room in the file
descriptor table for the worker processes' pipes, no interpreter teardown once a command is
done (:func:`exit_now`). The CLI turns them
on (:func:`tune`, before pyarrow or numpy is loaded); a program that imports traceconv keeps
its process as it is, and every switch below is then a no-op. Worker processes that a
conversion forks are its own and set what they need themselves (``keep_freed_memory``).
bench/README.md has the measurements behind each switch.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import gc
import importlib.abc
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any

M_TOP_PAD = -2  # glibc mallopt parameter: how much freed memory the heap keeps at its top
_tuned = False
_importing = False  # tuned, and the command's imports not yet done: no cyclic collection


def tune() -> None:
    """Switch this process to the conversion's settings (the CLI's first step)."""
    global _tuned, _importing
    _tuned = True
    # The command's imports (hundreds of modules, hundreds of thousands of objects, none of them
    # garbage) run without cyclic collection, which would walk them again and again (bench/README.md).
    # The command turns it back on once they are done (:func:`imported`).
    _importing = True
    gc.disable()
    # Arrow picks its allocator once, when pyarrow loads: glibc's malloc reuses freed memory
    # for whatever comes next, where pyarrow's default pool keeps it for the same size class.
    # A user's ARROW_DEFAULT_MEMORY_POOL still wins.
    if "pyarrow" not in sys.modules:
        os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    # numpy's OpenBLAS starts a thread per core when it loads, which spin on a core that the
    # conversion needs; traceconv does no linear algebra.
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    _reserve_descriptors()


# File descriptors this process may hold at once without the kernel growing its table: every
# worker process costs the main process a few (its pipes, its output file), up to
# ``workers.MAX_WORKERS`` of them.
DESCRIPTORS = 256


def _reserve_descriptors() -> None:
    """Grow the file descriptor table now, while this process has one thread: once pyarrow's
    threads share it, Linux grows it only after an RCU grace period, which on a busy many-core
    host stalls the fork of a worker (bench/README.md)."""
    if sys.platform != "linux":
        return
    import fcntl

    with contextlib.suppress(OSError, ValueError):  # a low RLIMIT_NOFILE; no standard error
        os.close(fcntl.fcntl(sys.__stderr__.fileno() if sys.__stderr__ else 2, fcntl.F_DUPFD, DESCRIPTORS - 1))


def tuned() -> bool:
    return _tuned


def imported() -> None:
    """The command's imports are done (when tuned): what they made is kept out of every later
    collection (``gc.freeze``: long-lived, and no page of it written again by a collection in a
    forked worker), and cyclic collection runs again. Once; a no-op after."""
    global _importing
    if _tuned and _importing:
        _importing = False
        gc.freeze()
        gc.enable()


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """No cyclic garbage collection inside (when tuned): the objects made there have no cycles."""
    was_enabled = gc.isenabled()
    if _tuned:
        gc.disable()
    try:
        yield
    finally:
        if _tuned and was_enabled:
            gc.enable()


def return_freed_memory() -> None:
    """Give the C heap's free pages back to the OS (when tuned; glibc only).

    glibc returns freed memory only from the top of its heap; what the link index frees
    after linking sits below live data and would stay in the process's RSS.
    """
    if _tuned:
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).malloc_trim(0)


def keep_freed_memory(pad: int) -> None:
    """In a worker process of our own: let glibc keep up to ``pad`` bytes of freed memory
    instead of returning it at once (a worker frees and allocates the same amounts, chunk
    after chunk). Not glibc (musl, macOS): nothing to do."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).mallopt(M_TOP_PAD, pad)


class _NoPandas(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        if fullname == "pandas" or fullname.startswith("pandas."):
            raise ImportError("pandas is not needed to convert a trace")
        return None


def skip_pandas_probe() -> None:
    """pyarrow imports pandas (tens of MB and 0.3 s) the first time ``pa.array`` is given
    anything but a numpy array, only to ask whether it is a pandas object; a conversion never
    passes one. When tuned, that first probe finds no pandas (pyarrow remembers the answer for
    that probe only: ``to_pandas()`` later imports pandas as usual)."""
    if not _tuned or "pandas" in sys.modules:
        return
    import pyarrow as pa

    finder = _NoPandas()
    sys.meta_path.insert(0, finder)
    try:
        pa.array([0])
    finally:
        sys.meta_path.remove(finder)


def exit_now(code: object) -> None:
    """End the process with ``code`` as ``SystemExit(code)`` would, once its exit handlers have
    run (temporary files, worker processes), without tearing the interpreter down: freeing every
    object and module one by one takes a tenth of a second or more after a large conversion, with
    nothing left to save. Returns instead (the caller exits as usual) where that is not safe:
    another Python thread still running, output that cannot be flushed (or no standard stream at
    all), a code that is a message.
    """
    if not _tuned or threading.active_count() > 1 or not (code is None or isinstance(code, int)):
        return
    if sys.stdout is None or sys.stderr is None:  # started with a standard stream closed
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed or broken stream: the usual exit reports it
        return
    atexit._run_exitfuncs()
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code or 0)


def available_memory() -> int:
    """MemAvailable of /proc/meminfo, in bytes (no limit known: as good as unlimited)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 1 << 62
