"""Make a larger real Nsight Systems export from a real one: its event tables repeated N times.

    python bench/make_big_nsys.py bench/data/big.sqlite bench/data/big_x16.sqlite --copies 16

Copy k of every event table (a table with a ``start`` or ``timestamp`` column: CUDA activity,
API calls, NVTX, GPU metrics samples, memory usage, profiler overhead, ...; and every CUDA
activity table, even one without a time) has every time
column moved by k times the export's span, so that the copies follow each other without
overlapping, and every id that links rows of one copy (``correlationId``, CUDA event ids,
NVTX ``rangeId``, the kernel's ``gridId``) moved by k times (largest id + 1), so that ids stay
unique and links stay inside their copy. Everything else is kept as it is: ids into
``StringIds`` (names), ``globalTid``/``globalPid`` (the same process and threads), graph ids
(the same graph launched again), and every descriptive table (StringIds, TARGET_INFO_*,
ENUM_*, metadata), once.

The copy is made by SQLite itself (``INSERT ... SELECT``, a page at a time): memory stays
flat whatever the size, and every value stays exact.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
from pathlib import Path

TIMES = ("start", "end", "timestamp", "rawTimestamp")
IDS = ("correlationId", "eventId", "eventSyncId", "rangeId", "gridId")


def _columns(db: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in db.execute(f"PRAGMA table_info([{table}])")]


def event_tables(db: sqlite3.Connection) -> list[str]:
    """Tables with rows and a time column (or CUDA activity without one: CUDA event records
    before 2026.2), in the export's order."""
    names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY rowid")]
    return [
        t
        for t in names
        if not t.startswith("sqlite_")
        and ({"start", "timestamp"} & set(_columns(db, t)) or t.startswith("CUPTI_ACTIVITY_KIND_"))
        and db.execute(f"SELECT 1 FROM [{t}] LIMIT 1").fetchone()
    ]


def shifts(db: sqlite3.Connection, tables: list[str]) -> tuple[int, dict[str, int]]:
    """(time shift in ns, id column -> shift): the span of every event, the largest id + 1."""
    lo: int | None = None
    hi: int | None = None
    top = dict.fromkeys(IDS, 0)
    for table in tables:
        cols = _columns(db, table)
        times = [c for c in TIMES if c in cols]
        for col in times:
            a, b = db.execute(f"SELECT min([{col}]), max([{col}]) FROM [{table}]").fetchone()
            if a is not None:
                lo, hi = (a if lo is None else min(lo, a)), (b if hi is None else max(hi, b))
        for col in IDS:
            if col in cols:
                (m,) = db.execute(f"SELECT max([{col}]) FROM [{table}]").fetchone()
                top[col] = max(top[col], m or 0)
    span = (hi - lo + 1) if lo is not None and hi is not None else 1
    return span, {col: m + 1 for col, m in top.items()}


def _select(cols: list[str], time_by: int, id_by: dict[str, int]) -> str:
    exprs = []
    for c in cols:
        if c in TIMES:
            exprs.append(f"[{c}] + {time_by}")  # NULL stays NULL
        elif c in id_by:
            exprs.append(f"CASE WHEN [{c}] > 0 THEN [{c}] + {id_by[c]} ELSE [{c}] END")  # 0: no id
        else:
            exprs.append(f"[{c}]")
    return ", ".join(exprs)


def make(src: Path, out: Path, copies: int) -> None:
    tmp = out.with_name(out.name + ".part")
    shutil.copyfile(src, tmp)
    db = sqlite3.connect(tmp, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode = OFF")
        db.execute("PRAGMA synchronous = OFF")
        tables = event_tables(db)
        span, top = shifts(db, tables)
        db.execute("BEGIN")
        for table in tables:
            cols = _columns(db, table)
            (last,) = db.execute(f"SELECT max(rowid) FROM [{table}]").fetchone()
            names = ", ".join(f"[{c}]" for c in cols)
            for k in range(1, copies):
                select = _select(cols, k * span, {c: k * top[c] for c in IDS if c in cols})
                db.execute(
                    f"INSERT INTO [{table}] ({names}) SELECT {select} FROM [{table}] WHERE rowid <= ? ORDER BY rowid",
                    (last,),
                )
        db.execute("COMMIT")
    finally:
        db.close()
    os.replace(tmp, out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("src", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--copies", type=int, default=4)
    args = parser.parse_args()
    make(args.src, args.out, args.copies)


if __name__ == "__main__":
    main()
