"""The real files of ``fixtures/`` by name, unpacked where they are stored as ``.xz`` (no pytest needed:
``tests/broken/make_broken.py`` runs as a script too)."""

from __future__ import annotations

import lzma
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
CACHE = ROOT / "build" / "fixtures"
PACKED = frozenset((FIXTURES / "PACKED").read_text().split()) if (FIXTURES / "PACKED").exists() else frozenset()


def fixture(rel: str, packed: bool = False) -> Path:
    """The real file ``fixtures/<rel>`` (``nsys/public/x.sqlite``), decompressed from ``<rel>.xz`` if stored
    so: the files of PACKED, or with ``packed`` one kept out of PACKED (too large for the sweeps)."""
    path = FIXTURES / rel
    if rel not in PACKED and not packed:
        if not path.exists():
            raise FileNotFoundError(f"no fixture {rel} in {FIXTURES}; run `make fixtures`")
        return path
    xz = path.with_name(path.name + ".xz")
    out = CACHE / rel
    if not out.exists() or out.stat().st_mtime < xz.stat().st_mtime:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        with lzma.open(xz) as src, open(tmp, "wb") as dst:
            while block := src.read(1 << 22):
                dst.write(block)
        os.replace(tmp, out)  # atomic: test processes running in parallel may do this at once
    return out


def fixture_name(path: Path) -> Path:
    """The name under ``fixtures/`` of a path :func:`fixture` handed out."""
    for base in (FIXTURES, CACHE):
        if path.is_relative_to(base):
            return path.relative_to(base)
    raise ValueError(f"{path} is not a fixture")


def sweep_chunk(path: Path, small: int) -> int:
    """Chunk bytes for cutting the real trace ``path`` into many pieces: ``small``, or for the
    larger traces about 1/64 of their JSON (a ``.gz`` taken as 8x its size), so that each makes
    dozens of chunks, not the thousand that ``small`` would make of a 35 MB trace."""
    size = path.stat().st_size * (8 if path.suffix == ".gz" else 1)
    return max(small, size // 64)
