"""The partitioned dataset (``OUT/rank=R/<trace>.parquet``): one table to pyarrow, DuckDB and
Polars with no glue, and traceconv's analyses and read_unified open only the partitions a
filter keeps (the other partitions' files are made unreadable to prove it)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
import pytest

import traceconv
from traceconv import dataset
from traceconv import schema as S

from .conftest import fixture
from .fleet_data import ingest, input_kinds, traces


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Counter[str]]:
    """The ten small real traces as a partitioned dataset, as a flat directory, and their kinds."""
    root = tmp_path_factory.mktemp("dataset")
    runs = traces(root / "runs", copies=1)
    assert ingest(runs, "-o", root / "ds.parquet", "--partitioned").returncode == 0
    assert ingest(runs, "-o", root / "flat.parquet").returncode == 0
    return root / "ds.parquet", root / "flat.parquet", input_kinds(runs)


def sql(query: str, *inputs: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "traceconv.cli", "sql", query, *map(str, inputs), "--format", "json"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_the_layout_is_hive_by_rank_with_a_schema_file(made: tuple[Path, Path, Counter[str]]) -> None:
    root, flat, _ = made
    assert sorted(p.name for p in root.iterdir()) == [
        dataset.COMMON_METADATA,
        "rank=0",
        "rank=1",
        f"rank={dataset.NULL_VALUE}",
    ]
    import pyarrow.parquet as pq

    common = pq.read_schema(root / dataset.COMMON_METADATA)
    assert common.remove_metadata() == S.SCHEMA.remove_metadata()
    assert common.metadata[S.META_SCHEMA_VERSION] == S.SCHEMA_VERSION.encode()
    for part in dataset.parts(root):  # each part is the file a flat run writes, rank column included
        assert part.read_bytes() == (flat / part.name).read_bytes()
        ranks = set(pq.read_table(part, columns=["rank"])["rank"].to_pylist())
        assert ranks == {None if part.parent.name.endswith(dataset.NULL_VALUE) else int(part.parent.name[5:])}


def test_pyarrow_duckdb_and_polars_read_it_as_one_table(made: tuple[Path, Path, Counter[str]]) -> None:
    root, _, kinds = made
    table = ds.dataset(root, format="parquet", partitioning="hive").to_table()
    assert Counter(table["kind"].to_pylist()) == kinds
    rows = duckdb.sql(
        f"SELECT kind, count(*) FROM read_parquet('{root}/**/*.parquet', hive_partitioning = true) GROUP BY kind"
    ).fetchall()
    assert Counter(dict(rows)) == kinds
    pl = pytest.importorskip("polars")
    frame = pl.scan_parquet(f"{root}/**/*.parquet", hive_partitioning=True).group_by("kind").len().collect()
    assert Counter(dict(zip(frame["kind"].to_list(), frame["len"].to_list(), strict=True))) == kinds
    per_rank = pl.scan_parquet(f"{root}/**/*.parquet", hive_partitioning=True).group_by("rank").len().collect()
    assert per_rank.schema["rank"] == pl.Int32 and None in per_rank["rank"].to_list()


def test_the_tables_handed_out_group_and_join_in_pyarrow(made: tuple[Path, Path, Counter[str]]) -> None:
    """Each file, row group and reader batch has dictionaries of its own; a table that the library hands
    out has one per column, so that pyarrow's group_by and join take it (they refuse chunks whose
    dictionaries differ)."""
    root, flat, kinds = made
    for path in (root, flat):
        table = traceconv.read_table(path, columns=["event_id", "trace_id", "kind"])
        counted = table.group_by("kind").aggregate([("event_id", "count")]).to_pylist()
        assert {r["kind"]: r["event_id_count"] for r in counted} == kinds
    trace = traceconv.read(fixture("pytorch/h200/train_buggy.pt.trace.json.gz"))
    assert trace["name"].num_chunks > 1
    ids = trace.select(["event_id", "name"]).join(trace.select(["event_id", "kind"]), "event_id")
    assert ids.num_rows == trace.num_rows


def _only_rank_zero_readable(root: Path, into: Path) -> Path:
    """A copy of the dataset whose other partitions' files are not Parquet any more."""
    shutil.copytree(root, into)
    for part in dataset.parts(into):
        if part.parent.name != "rank=0":
            part.write_bytes(b"not parquet: reading this file fails")
    return into


def test_a_query_about_one_rank_reads_only_its_files(made: tuple[Path, Path, Counter[str]], tmp_path: Path) -> None:
    root, _, _ = made
    query = "SELECT kind, count(*) AS n FROM events WHERE rank = 0 GROUP BY kind ORDER BY kind"
    want = sql(query, root)
    assert want.returncode == 0, want.stderr
    damaged = _only_rank_zero_readable(root, tmp_path / "damaged.parquet")
    got = sql(query, damaged)
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout) == json.loads(want.stdout) and json.loads(got.stdout)
    everything = sql("SELECT count(*) AS n FROM events", damaged)
    assert everything.returncode != 0  # the test can fail: the damaged files are read when asked for


def test_read_unified_pushes_filters_down(made: tuple[Path, Path, Counter[str]], tmp_path: Path) -> None:
    root, _, _ = made
    damaged = _only_rank_zero_readable(root, tmp_path / "damaged.parquet")
    frame = traceconv.read_unified(damaged, filters=[("rank", "=", 0)], columns=["rank", "kind"])
    whole = traceconv.read_unified(root, columns=["rank", "kind"])
    assert len(frame) == (whole["rank"] == 0).sum() > 0 and set(frame["rank"]) == {0}
    kernels = traceconv.read_unified(damaged, kinds=["kernel"], filters=ds.field("rank") == 0)
    assert (
        set(kernels["kind"]) == {"kernel"}
        and len(kernels) == ((whole["rank"] == 0) & (whole["kind"] == "kernel")).sum()
    )
    assert traceconv.read_table(root).schema.field("rank").type == pa.int32()
    with pytest.raises(Exception, match=r"not parquet|Parquet magic|Could not open"):
        traceconv.read_unified(damaged)


@pytest.mark.parametrize("command", [["summary", "--format", "json"], ["kernels", "--format", "csv"]])
def test_analyses_of_the_dataset_equal_those_of_the_flat_files(
    made: tuple[Path, Path, Counter[str]], command: list[str]
) -> None:
    root, flat, _ = made
    runs = [
        subprocess.run(
            [sys.executable, "-m", "traceconv.cli", *command[:1], str(p), *command[1:]],
            capture_output=True,
            text=True,
            timeout=300,
        )
        for p in (root, flat)
    ]
    assert runs[0].returncode == 0 == runs[1].returncode, runs[0].stderr + runs[1].stderr
    if command[0] == "summary":  # the input's name aside
        a, b = json.loads(runs[0].stdout), json.loads(runs[1].stdout)
        a.pop("input", None), b.pop("input", None)
        assert a == b
    else:
        assert runs[0].stdout == runs[1].stdout


def test_an_unfinished_dataset_is_read_with_a_note(made: tuple[Path, Path, Counter[str]], tmp_path: Path) -> None:
    root, _, _ = made
    copy = shutil.copytree(root, tmp_path / "copy.parquet")
    (copy / dataset.COMMON_METADATA).unlink()
    run = sql("SELECT count(*) AS n FROM events", copy)
    assert run.returncode == 0 and "is not finished" in run.stderr, run.stderr
