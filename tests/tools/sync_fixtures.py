"""Copy the real files of ``../shared/corpus`` into ``fixtures/`` (``make fixtures``).

The fixtures mirror the corpus' layout, so that a clone without ``../shared`` tests what
a clone with it tests. JSON, SQLite and CSV files over ``RAW_LIMIT`` bytes are stored as
``.xz`` and listed in ``fixtures/PACKED`` (the tests decompress them once into
``build/fixtures/``, see ``tests/conftest.py``);
files that are compressed already (``.gz``, ``.xz``, ``.nsys-rep``) are copied as they are.
Files of ``fixtures/`` that the corpus does not have (``nsys/h200-extra/``) are left alone.

    python tests/tools/sync_fixtures.py [--corpus PATH] [--check]

``--check`` changes nothing and exits 1 when a fixture is missing or differs from the corpus.
"""

from __future__ import annotations

import argparse
import lzma
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
RAW_LIMIT = 400_000
COMPRESSIBLE = (".json", ".sqlite", ".csv")


def stored_name(rel: Path, size: int) -> Path:
    """Where a corpus file ``rel`` of ``size`` bytes is kept under fixtures/."""
    if rel.suffix in COMPRESSIBLE and size > RAW_LIMIT:
        return rel.with_name(rel.name + ".xz")
    return rel


def plan(corpus: Path) -> list[tuple[Path, Path]]:
    """(corpus file, fixture file) pairs."""
    pairs = []
    for src in sorted(p for p in corpus.rglob("*") if p.is_file() and p.name != "README.md"):
        rel = src.relative_to(corpus)
        pairs.append((src, FIXTURES / stored_name(rel, src.stat().st_size)))
    return pairs


def content(path: Path) -> bytes:
    data = path.read_bytes()
    return lzma.decompress(data) if path.suffix == ".xz" else data


def same(src: Path, dst: Path) -> bool:
    if not dst.exists():
        return False
    if dst.suffix == ".xz" and src.suffix != ".xz":
        return content(dst) == src.read_bytes()
    return dst.read_bytes() == src.read_bytes()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "corpus")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    if not args.corpus.is_dir():
        print(f"{args.corpus}: no corpus there; give --corpus", file=sys.stderr)
        return 2
    stale = 0
    for src, dst in plan(args.corpus):
        if same(src, dst):
            continue
        stale += 1
        print(("differs: " if dst.exists() else "missing: ") + str(dst.relative_to(ROOT)))
        if args.check:
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        data = src.read_bytes()
        if dst.suffix == ".xz" and src.suffix != ".xz":
            data = lzma.compress(data, preset=9 | lzma.PRESET_EXTREME)
        dst.write_bytes(data)
        raw = dst.with_suffix("")
        if dst.suffix == ".xz" and raw.exists():  # stored compressed now: the plain copy goes
            raw.unlink()
    if not args.check:
        write_manifest(args.corpus)
    return 1 if args.check and stale else 0


def write_manifest(corpus: Path) -> None:
    """``fixtures/PACKED``: the files stored as ``.xz`` here that are plain files in the corpus
    (the tests unpack those; a file the corpus itself keeps as ``.xz`` stays one)."""
    kept_packed = {p.relative_to(corpus) for p in corpus.rglob("*.xz")}
    packed = sorted(
        str(p.relative_to(FIXTURES).with_suffix(""))
        for p in FIXTURES.rglob("*.xz")
        if p.relative_to(FIXTURES) not in kept_packed
    )
    (FIXTURES / "PACKED").write_text("".join(f"{name}\n" for name in packed))


if __name__ == "__main__":
    sys.exit(main())
