"""One tool on one input, in a process of its own: ``python bench/runner.py TOOL INPUT OUTDIR``.

bench/run.py starts this under the interpreter that has the tool (the product's venv for
orjson and pandas, bench/.venv-alt for the alternatives) and measures the whole process.
Each function is what a user of that tool would write; imports happen inside it so that
the process pays only for its own tool. A line on stdout says what was produced, as a
sanity check that the tool did the work.
"""

from __future__ import annotations

import gzip
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

# The kernel-to-runtime join that every SQLite row runs (nsys's own key: globalPid of the
# kernel = globalTid of the API call with its thread bits masked).
KERNEL_JOIN = """
SELECT k.start, k."end", k.deviceId, k.streamId, k.correlationId, k.demangledName,
       k.gridX, k.gridY, k.gridZ, k.blockX, k.blockY, k.blockZ,
       r.start AS api_start, r."end" AS api_end, r.nameId AS api_name, r.globalTid
FROM CUPTI_ACTIVITY_KIND_KERNEL k
JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
  ON k.correlationId = r.correlationId AND k.globalPid = (r.globalTid & 0xFFFFFFFFFF000000)
""".strip()
# The tables `traceconv nsys` converts (its event tables) and the names they refer to.
NSYS_TABLES = (
    "StringIds",
    "NVTX_EVENTS",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
    "OSRT_API",
    "PROFILER_OVERHEAD",
    "CUPTI_ACTIVITY_KIND_CUDA_EVENT",
    "DIAGNOSTIC_EVENT",
    "GPU_METRICS",
    "CUDA_GPU_MEMORY_USAGE_EVENTS",
)


def _raw(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if path.suffix == ".gz" else data


def orjson_loads(path: Path, out: Path) -> str:
    import orjson

    doc = orjson.loads(_raw(path))
    return f"{len(doc['traceEvents'])} events"


def orjson_pandas(path: Path, out: Path) -> str:
    import orjson
    import pandas as pd

    events = orjson.loads(_raw(path))["traceEvents"]
    df = pd.DataFrame(events)
    args = pd.json_normalize([e.get("args") or {} for e in events]).add_prefix("args.")
    df = df.drop(columns="args").join(args)
    # The fix it needs: columns mixing types (pid 123 and "Spans", lists and scalars) as text.
    for col in df.select_dtypes(include="object").columns:
        if pd.api.types.infer_dtype(df[col], skipna=True).startswith("mixed"):
            df[col] = df[col].astype(str)
    df.to_parquet(out / "out.parquet")
    return f"{len(df)} rows, {len(df.columns)} columns"


def duckdb_json(path: Path, out: Path) -> str:
    import duckdb

    con = duckdb.connect()
    # The whole trace is one JSON object; the cap is a UINT32 (larger is refused) and costs no memory.
    con.execute(
        f"COPY (SELECT unnest(traceEvents, recursive := true) FROM read_json(?, maximum_object_size={(1 << 32) - 1})) "
        f"TO '{out / 'out.parquet'}' (FORMAT parquet)",
        [str(path)],
    )
    rows = con.sql(f"SELECT count(*) FROM '{out / 'out.parquet'}'").fetchone()
    return f"{rows[0] if rows else '?'} rows"


def polars_json(path: Path, out: Path) -> str:
    import io

    import polars as pl

    source: Any = io.BytesIO(_raw(path)) if path.suffix == ".gz" else path
    events = pl.read_json(source).select(pl.col("traceEvents").explode()).unnest("traceEvents")
    events.write_parquet(out / "out.parquet")
    return f"{events.height} rows, {events.width} columns"


def ijson_count(path: Path, out: Path) -> str:
    import ijson

    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        n = sum(1 for _ in ijson.items(fh, "traceEvents.item", use_float=True))
    return f"{n} events ({ijson.backend})"


def _hta(path: Path, backend: str) -> str:
    from hta.common.trace_parser import parse_trace_dataframe
    from hta.configs.parser_config import ParserBackend, ParserConfig

    cfg = ParserConfig()
    cfg.set_parser_backend(ParserBackend(backend))
    _meta, df, _symbols = parse_trace_dataframe(str(path), cfg)
    return f"{len(df)} rows ({backend})"


def hta_json(path: Path, out: Path) -> str:
    return _hta(path, "json")


def hta_ijson(path: Path, out: Path) -> str:
    return _hta(path, "ijson_batch_and_compress")


def pandas_read_sql(path: Path, out: Path) -> str:
    import sqlite3

    import pandas as pd

    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
        df = pd.read_sql(KERNEL_JOIN, con)
    return f"{len(df)} kernels joined"


def _duckdb_attached(path: Path) -> Any:
    import duckdb
    import duckdb_extension_sqlite_scanner as ext  # the extension, from PyPI (no download at run time)

    binary = next(Path(ext.__path__[0]).rglob("*.duckdb_extension"))
    con = duckdb.connect()
    con.execute(f"LOAD '{binary}'")
    con.execute(f"ATTACH '{path}' AS s (TYPE sqlite, READ_ONLY)")
    return con


def duckdb_sqlite(path: Path, out: Path) -> str:
    con = _duckdb_attached(path)
    # DuckDB has no hex literals; -16777216 is 0xFFFFFFFFFF000000 as the int64 SQLite reads.
    query = KERNEL_JOIN.replace("CUPTI_ACTIVITY_KIND_", "s.CUPTI_ACTIVITY_KIND_").replace(
        "0xFFFFFFFFFF000000", "-16777216"
    )
    con.execute(f"COPY ({query}) TO '{out / 'out.parquet'}' (FORMAT parquet)")
    rows = con.sql(f"SELECT count(*) FROM '{out / 'out.parquet'}'").fetchone()
    return f"{rows[0] if rows else '?'} kernels joined"


def duckdb_copy_tables(path: Path, out: Path) -> str:
    """Every event table that traceconv converts, and StringIds, copied as they are to Parquet."""
    con = _duckdb_attached(path)
    query = "SELECT table_name FROM information_schema.tables WHERE table_catalog = 's'"
    have = {r[0] for r in con.execute(query).fetchall()}
    rows = 0
    for table in [t for t in NSYS_TABLES if t in have]:
        con.execute(f"COPY s.{table} TO '{out / table}.parquet' (FORMAT parquet)")
        got = con.sql(f"SELECT count(*) FROM '{out / table}.parquet'").fetchone()
        rows += got[0] if got else 0
    return f"{rows} rows copied"


def duckdb_group_bys(path: Path, out: Path) -> str:
    """The scale issue's reference for the analyses: four group-bys over the unified Parquet
    (kernels by name, GPU time by operator, copies by kind, API calls by name)."""
    import duckdb

    con = duckdb.connect()
    con.execute(f"CREATE VIEW events AS SELECT * FROM read_parquet('{path}')")
    queries = (
        "SELECT name, count(*), sum(dur_ns) FROM events WHERE kind = 'kernel' GROUP BY 1",
        "SELECT op_name, sum(dur_ns) FROM events WHERE kind IN ('kernel', 'memcpy', 'memset') GROUP BY 1",
        "SELECT copy_kind, count(*), sum(bytes), sum(dur_ns) FROM events WHERE kind = 'memcpy' GROUP BY 1",
        "SELECT name, count(*), sum(dur_ns) FROM events WHERE kind = 'cuda_api' GROUP BY 1",
    )
    groups = sum(len(con.execute(q).fetchall()) for q in queries)
    return f"{groups} groups"


TOOLS: dict[str, Callable[[Path, Path], str]] = {
    f.__name__: f
    for f in (orjson_loads, orjson_pandas, duckdb_json, polars_json, ijson_count, hta_json, hta_ijson,
              pandas_read_sql, duckdb_sqlite, duckdb_copy_tables, duckdb_group_bys)
}  # fmt: skip

if __name__ == "__main__":
    tool, src, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    print(TOOLS[tool](src, out))
