"""Nsight Systems reports (``.nsys-rep``, ``.qdrep``): exported to SQLite by ``nsys``, then read.

The export goes to a cache beside the report (``.traceconv-cache/``), or to a temporary
folder when that is not writable, and is reused while it is newer than the report. Only
``.nsys-rep`` is forward compatible: an older ``nsys`` refuses a newer report.
"""

from __future__ import annotations

import glob
import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import ClassVar

import pyarrow as pa

from traceconv.errors import InputError, ToolMissingError, UsageError
from traceconv.readers.base import Progress, TraceInfo, trace_stem
from traceconv.readers.nsys.reader import REPEATED_COLUMNS, NsysReader

CACHE_DIR = ".traceconv-cache"
# Where Nsight Systems installs nsys (Linux packages, CUDA toolkit, Nsight Compute bundle, HPC SDK, Windows).
SEARCH = (
    "/opt/nvidia/nsight-systems/*/bin/nsys",
    "/opt/nvidia/nsight-systems-cli/*/bin/nsys",
    "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys",
    "/usr/local/cuda/bin/nsys",
    "/usr/local/cuda-*/bin/nsys",
    "/usr/lib/nsight-systems/bin/nsys",
    "/opt/nvidia/hpc_sdk/*/*/profilers/Nsight_Systems/bin/nsys",
    "/opt/nvidia/hpc_sdk/*/*/compilers/bin/nsys",
    "C:/Program Files/NVIDIA Corporation/Nsight Systems */target-windows-x64/nsys.exe",
)


def export_command(nsys: str, report: Path, out: Path) -> list[str]:
    return [nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "-o", str(out), str(report)]


def _runnable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_nsys(
    explicit: str | Path | None = None, env: Mapping[str, str] | None = None, search: tuple[str, ...] = SEARCH
) -> Path | None:
    """``--nsys``, then ``$NSYS``, then the PATH, then the usual install folders (newest first)."""
    env = os.environ if env is None else env
    if explicit is not None:
        path = Path(explicit)
        if not _runnable(path):
            raise UsageError(path, "given as --nsys is not an executable file", "give the path of the nsys binary")
        return path
    if env.get("NSYS"):
        path = Path(env["NSYS"])
        if not _runnable(path):
            raise UsageError(path, "named by $NSYS is not an executable file", "fix or unset NSYS")
        return path
    found = shutil.which("nsys", path=env.get("PATH", os.defpath))
    if found:
        return Path(found)
    for pattern in search:
        hits = sorted((Path(p) for p in glob.glob(pattern)), key=lambda p: _version_key(str(p)), reverse=True)
        for hit in hits:
            if _runnable(hit):
                return hit
    return None


def _version_key(path: str) -> list[int | str]:
    """``2025.3.1`` after ``2024.6.2`` after ``2024.10.1`` would not hold as text: compare numbers."""
    out: list[int | str] = []
    for piece in path.replace("-", ".").replace("/", ".").split("."):
        out.append(int(piece) if piece.isdigit() else -1)
    return out


def cache_path(report: Path) -> Path:
    """Where the export of ``report`` goes: beside it, or in the temp folder when that is read-only."""
    folder = report.resolve().parent / CACHE_DIR
    try:
        folder.mkdir(exist_ok=True)
        probe = folder / f".probe-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError:
        digest = hashlib.sha1(str(report.resolve()).encode()).hexdigest()[:12]
        folder = Path(tempfile.gettempdir()) / f"traceconv-cache-{os.getuid() if hasattr(os, 'getuid') else 0}"
        folder.mkdir(exist_ok=True)
        return folder / f"{digest}-{report.name}.sqlite"
    return folder / f"{report.name}.sqlite"


def _fresh(cache: Path, report: Path) -> bool:
    return cache.exists() and cache.stat().st_mtime >= report.stat().st_mtime and cache.stat().st_size > 0


class NsysReportReader:
    """A report: run ``nsys export`` once, then read the SQLite export with :class:`NsysReader`."""

    OPTIONS: ClassVar[frozenset[str]] = frozenset({"include_environment", "nsys"})
    REPEATED: ClassVar[tuple[str, ...]] = REPEATED_COLUMNS
    SPARSE_GROUPS: ClassVar[bool] = NsysReader.SPARSE_GROUPS

    def __init__(
        self,
        path: Path,
        progress: Progress | None = None,
        nsys: str | Path | None = None,
        include_environment: bool = False,
    ) -> None:
        self.path = Path(path)
        self.info = TraceInfo(path=self.path, source="nsys", trace_id=trace_stem(self.path))
        self._progress = progress
        self._include_environment = include_environment
        self._sort: set[str] = set()  # the export's tables found out of order (NsysReader's ``sort``)
        self.nsys = find_nsys(nsys)
        if self.nsys is None:
            by_hand = shlex.join(export_command("nsys", self.path, self.path.with_suffix(".sqlite")))
            raise ToolMissingError(
                self.path,
                "is a report, and converting it needs Nsight Systems' `nsys`, which was not found "
                "(--nsys, $NSYS, PATH, /opt/nvidia/..., /usr/local/cuda/bin)",
                f"install Nsight Systems or pass --nsys PATH; or export it by hand with `{by_hand}` "
                f"and convert the .sqlite",
            )

    def export(self) -> Path:
        cache = cache_path(self.path)
        if _fresh(cache, self.path):
            return cache
        tmp = cache.with_name(f".{cache.stem}.{os.getpid()}.sqlite")
        cmd = export_command(str(self.nsys), self.path, tmp)
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, errors="replace", check=False)
        except OSError as exc:
            raise ToolMissingError(
                self.path, f"`{self.nsys}` could not be run ({exc})", "pass a working nsys with --nsys"
            ) from exc
        if done.returncode != 0 or not tmp.exists():
            tmp.unlink(missing_ok=True)
            said = (done.stderr or done.stdout).strip().splitlines()
            raise InputError(
                self.path,
                f"`nsys export` failed (exit {done.returncode}): {said[-1] if said else ''}",
                f"a report newer than this nsys needs a newer one (--nsys PATH); ran: {shlex.join(cmd)}",
            )
        os.replace(tmp, cache)
        return cache

    def tables(self) -> Iterator[pa.Table]:
        cache = self.export()
        inner = NsysReader(cache, self._progress, self._include_environment, source_path=self.path)
        inner.sort = self._sort
        inner.info.ignored.extend(self.info.ignored)
        self.info = inner.info
        self.info.notes.append(f"exported with {self.nsys} to {cache}")
        yield from inner.tables()
