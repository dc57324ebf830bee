"""Convert Nsight Systems exports with an older traceconv and with this one, and compare the Parquet.

    .venv/bin/python bench/compare_nsys.py --old /tmp/old-src [EXPORT.sqlite ...]

``--old`` is a source tree of the older traceconv (``git archive <commit> traceconv | tar -x``):
it runs under this venv's Python with that tree first on ``sys.path``. Without exports, every
``.sqlite`` of ``fixtures/nsys`` (unpacked from ``.xz``), of the corpus and of ``--also`` is
converted. Each pair is compared byte for byte and, where the bytes differ, table by table:
every column both files have (values, row for row, dictionaries read as their values), the
columns only the new file has (listed with their null counts), and the metadata
(``traceconv.stats`` and ``traceconv.trace``). Rows the new file has after all of the old
one's (tables converted now that were not before) are counted by kind, and the rows before
them compared; the stats then differ by those rows and are not compared. Exit 1 on any
difference in values or metadata.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CONVERT = "import sys, traceconv; traceconv.convert(sys.argv[1], sys.argv[2])"
# The older tree comes first on sys.path; an editable install's finder (which would import this
# tree's traceconv whatever the path says) is taken off first.
OLD = (
    "import sys; sys.meta_path = [f for f in sys.meta_path if 'editable' not in getattr(f, '__module__', '')]; "
    "sys.path.insert(0, sys.argv.pop(1)); import traceconv; "
    "assert traceconv.__file__.startswith(sys.path[0]), traceconv.__file__; "
)


def exports(shared: Path, also: list[Path]) -> list[Path]:
    from tests.fixtures import FIXTURES, PACKED, fixture

    found = {p.name: p for p in sorted((FIXTURES / "nsys").rglob("*.sqlite"))}
    for rel in sorted(PACKED):
        if rel.startswith("nsys/") and rel.endswith(".sqlite"):
            found.setdefault(Path(rel).name, fixture(rel))
    for p in sorted((shared / "corpus" / "nsys").rglob("*.sqlite")):
        found.setdefault(p.name, p)
    for p in also:
        found[p.name] = p
    return list(found.values())


def convert(src: Path, out: Path, old: Path | None) -> None:
    env = dict(os.environ, ARROW_DEFAULT_MEMORY_POOL="system")
    code, first = (OLD + CONVERT, [str(old)]) if old is not None else (CONVERT, [])
    subprocess.run([sys.executable, "-c", code, *first, str(src), str(out)], env=env, check=True)


def _plain(col: Any) -> Any:
    import pyarrow as pa

    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    return col.cast(col.type.value_type) if pa.types.is_dictionary(col.type) else col


def differences(old: Path, new: Path) -> tuple[list[str], list[str]]:
    """(differences, notes): what is not the same, and the columns only the new file has."""
    import pyarrow.parquet as pq

    a, b = pq.read_table(old), pq.read_table(new)
    diffs: list[str] = []
    added: list[str] = []
    if a.num_rows < b.num_rows:  # tables converted now that were not: their rows come after the others
        extra_rows = b.slice(a.num_rows)
        kinds = sorted(set(extra_rows["kind"].to_pylist()))
        added = [f"{extra_rows.num_rows:,} rows added after the {a.num_rows:,} compared ({', '.join(kinds)})"]
        b = b.slice(0, a.num_rows)
    elif a.num_rows != b.num_rows:
        return [f"rows {a.num_rows:,} -> {b.num_rows:,}"], []
    for name in a.column_names:
        if name not in b.column_names:
            diffs.append(f"column {name} missing")
        elif not _plain(a[name]).equals(_plain(b[name])):
            diffs.append(f"column {name} differs")
    extra = [n for n in b.column_names if n not in a.column_names]
    keys = (b"traceconv.trace", b"traceconv.time_base", b"traceconv.source")
    for key in keys if added else (b"traceconv.stats", *keys):
        ma, mb = (a.schema.metadata or {}).get(key), (b.schema.metadata or {}).get(key)
        if ma != mb and json.loads(ma or b"null") != json.loads(mb or b"null"):
            diffs.append(f"metadata {key.decode()} differs")
    return diffs, [*added, *(f"new column {n} ({b[n].null_count:,} null of {b.num_rows:,})" for n in extra)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="*", type=Path)
    parser.add_argument("--old", type=Path, required=True, help="source tree of the older traceconv")
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared")
    parser.add_argument("--also", type=Path, nargs="*", default=[], help="more exports besides the corpus")
    args = parser.parse_args()
    paths = args.paths or exports(args.shared, args.also)
    failed = 0
    with tempfile.TemporaryDirectory(prefix="compare-nsys-") as tmp:
        for src in paths:
            old_out, new_out = Path(tmp) / "old.parquet", Path(tmp) / "new.parquet"
            convert(src, old_out, args.old)
            convert(src, new_out, None)
            same = old_out.read_bytes() == new_out.read_bytes()
            diffs, notes = ([], []) if same else differences(old_out, new_out)
            failed += bool(diffs)
            verdict = "byte-identical" if same else ("DIFFERENT: " + "; ".join(diffs) if diffs else "same values")
            print(f"{src.name[:60]:60} {verdict}" + (f" ({'; '.join(notes)})" if notes else ""), flush=True)
    print(f"{len(paths)} exports, {failed} with differences")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
