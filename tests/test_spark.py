"""The Spark recipe of docs/many-traces.md on a local Spark session: the partitioned dataset reads with every
column type intact, and the three example queries of `traceconv sql` give the same rows in
PySpark as in traceconv. Marked ``spark``; CI (CI=true) runs it, elsewhere a missing Java or
pyspark skips it with the reason."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from traceconv import schema as S

from .conftest import CORPUS_REQUIRED, ROOT
from .fleet_data import ingest, input_kinds, traces

pytestmark = pytest.mark.spark
RECIPE = (ROOT / "docs" / "many-traces.md").read_text()
QUERIES = (ROOT / "docs" / "sql.md").read_text()


def _spark_or_skip() -> Any:
    missing = None
    try:
        import pyspark  # noqa: F401
    except ImportError:
        missing = "pyspark is not installed (pip install 'traceconv[spark]')"
    if missing is None and shutil.which("java") is None:
        missing = "no Java runtime (apt-get install -y default-jre-headless)"
    if missing is not None:
        if CORPUS_REQUIRED:
            pytest.fail(f"CI runs the Spark test: {missing}")
        pytest.skip(missing)
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master("local[2]")
        .appName("traceconv-test")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = _spark_or_skip()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    root = tmp_path_factory.mktemp("spark")
    runs = traces(root / "runs", copies=1)
    assert ingest(runs, "-o", root / "ds.parquet", "--partitioned").returncode == 0
    return root / "ds.parquet", input_kinds(runs)


SPARK_TYPES = {"int64": "LongType()", "int32": "IntegerType()", "double": "DoubleType()", "string": "StringType()"}


def test_spark_reads_every_column_with_its_type(spark: Any, made: tuple[Path, Any]) -> None:
    root, kinds = made
    frame = spark.read.parquet(str(root))
    types = {f.name: repr(f.dataType) for f in frame.schema.fields}
    assert set(types) == set(S.NAMES)
    for field in S.SCHEMA:
        arrow = "string" if str(field.type).startswith("dictionary") else str(field.type)
        assert types[field.name] == SPARK_TYPES[arrow], field.name
    rows = frame.groupBy("kind").count().collect()
    assert {r["kind"]: r["count"] for r in rows} == dict(kinds)
    ranks = {r["rank"] for r in frame.select("rank").distinct().collect()}
    assert ranks == {0, 1, None}


def _sql_page_queries() -> list[str]:
    return re.findall(r"```sql\n(.*?)```", QUERIES, re.S)


def _rows(records: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    def norm(v: Any) -> Any:
        return round(v, 6) if isinstance(v, float) and not math.isnan(v) else v

    return sorted((tuple(norm(v) for v in r.values()) for r in records), key=repr)


def test_the_recipe_gives_the_rows_traceconv_sql_gives(spark: Any, made: tuple[Path, Any]) -> None:
    root, _ = made
    block = RECIPE.split("<!-- spark-recipe:start -->", 1)[1].split("<!-- spark-recipe:end -->", 1)[0]
    code = re.search(r"```python\n(.*?)```", block, re.S)
    assert code is not None
    scope: dict[str, Any] = {"DATASET": str(root)}
    exec(code.group(1), scope)
    queries = _sql_page_queries()
    assert len(queries) == 3
    for name, query in zip(["top_kernels", "gpu_per_range", "copies_per_rank"], queries, strict=True):
        cmd = [sys.executable, "-m", "traceconv.cli", "sql", query, str(root), "--format", "json"]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        want = json.loads(run.stdout)
        got = [r.asDict() for r in scope[name].collect()]
        assert want, name  # the dataset has kernels, ranges and copies: the comparison means something
        assert _rows(got) == _rows(want), name
