"""Write ``tests/golden/kernel_engines.csv``: every kernel name of the fixtures' real profiles, read from the raw
files (Kineto JSON ``cat`` kernel/Kernel events; Nsight Systems' CUPTI_ACTIVITY_KIND_KERNEL demangled names),
with what :mod:`traceconv.analyses.roofline.tensor_cores` makes of it, and a count per rule on stdout.

    python -m tests.tools.kernel_engines
"""

from __future__ import annotations

import collections
import csv
import gzip
import json
import lzma
import sqlite3
import tempfile
from pathlib import Path

from tests.fixtures import FIXTURES, ROOT, fixture
from traceconv.analyses.roofline.tensor_cores import classify

GOLDEN = ROOT / "tests" / "golden" / "kernel_engines.csv"
COLUMNS = ("name", "rule", "engine", "dtype", "profiles")


def profiles() -> list[str]:
    """The fixtures' PyTorch traces and Nsight Systems exports, by name under ``fixtures/``."""
    out = set()
    for path in FIXTURES.rglob("*"):
        rel = str(path.relative_to(FIXTURES)).removesuffix(".xz")
        if rel.endswith((".sqlite", ".json", ".json.gz")) and not rel.endswith((".ka.json", "key_averages.json")):
            out.add(rel)
    return sorted(out - {"planted/manifest.json"})


def kernel_names(rel: str) -> set[str]:
    """The kernel names of the fixture ``rel``."""
    return names_in(fixture(rel, packed=not (FIXTURES / rel).exists()))


def names_in(path: Path) -> set[str]:
    """The kernel names of a profile anywhere (a corpus file, ``.xz`` too): Kineto JSON ``cat`` kernel/Kernel
    events, Nsight Systems' demangled kernel names."""
    if path.name.endswith(".sqlite.xz"):
        with tempfile.TemporaryDirectory() as tmp, lzma.open(path) as src:
            plain = Path(tmp) / path.name.removesuffix(".xz")
            plain.write_bytes(src.read())
            return names_in(plain)
    if path.suffix == ".sqlite":
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            rows = db.execute(
                "SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName"
            ).fetchall()
        except sqlite3.OperationalError:  # an export without kernels
            rows = []
        db.close()
        return {r[0] for r in rows}
    opener = gzip.open if path.suffix == ".gz" else lzma.open if path.suffix == ".xz" else open
    with opener(path, "rt") as f:
        doc = json.load(f)
    events = doc if isinstance(doc, list) else doc.get("traceEvents", [])
    return {e["name"] for e in events if isinstance(e, dict) and str(e.get("cat", "")).lower() == "kernel"}


def rows() -> list[dict[str, str]]:
    seen: dict[str, set[str]] = collections.defaultdict(set)
    for rel in profiles():
        for name in kernel_names(rel):
            seen[name].add(rel)
    out = []
    for name in sorted(seen):
        e = classify(name)
        out.append(
            {
                "name": name,
                "rule": e.rule,
                "engine": e.engine or "",
                "dtype": e.dtype or "",
                "profiles": str(len(seen[name])),
            }
        )
    return out


def main() -> None:
    found = rows()
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    with open(GOLDEN, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(found)
    counts = collections.Counter((r["rule"], r["engine"], r["dtype"]) for r in found)
    for (rule, engine, dtype), n in sorted(counts.items()):
        print(f"{rule:10} {engine or '-':7} {dtype or '-':7} {n:4}")
    print(f"{len(found)} kernel names -> {GOLDEN.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
