"""Files of an earlier schema version: read as the current schema, the columns they lack null.

``fixtures/parquet/v1_*.parquet`` were written by the traceconv of e5de432 (schema v1) from two
fixtures; converted again now, the same traces must give the same events and the same analyses.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import traceconv
from traceconv import schema as S
from traceconv.cli import main

from .conftest import fixture
from .perfetto_read import Trace, read

# v1 file -> the fixture it was converted from
V1 = {
    "parquet/v1_seed_linear.parquet": "pytorch/h200/seed_linear.json",
    "parquet/v1_graph_node.parquet": "nsys/h200/graph_node.sqlite",
}


def _run(*args: str) -> Any:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result


def _plain(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.astype({c: object for c in frame.columns if isinstance(frame[c].dtype, pd.CategoricalDtype)})


@pytest.fixture(scope="module", params=sorted(V1))
def pair(request: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the v1 file, the same trace converted now)."""
    out = tmp_path_factory.mktemp("v2") / Path(request.param).name  # the same name: outputs name their input
    traceconv.convert(fixture(V1[request.param]), out)
    return fixture(request.param), out


def test_a_v1_file_lacks_exactly_the_columns_v2_added(pair: tuple[Path, Path]) -> None:
    old, new = pair
    assert traceconv.trace_metadata(old)["schema_version"] == "1"
    assert traceconv.trace_metadata(new)["schema_version"] == S.SCHEMA_VERSION == "2"
    assert pq.read_schema(old).names == [n for n in S.NAMES if n not in S.ADDED_IN_2]


def test_read_unified_gives_every_column_those_v1_lacks_null(pair: tuple[Path, Path]) -> None:
    old, new = pair
    before, now = traceconv.read_unified(old), traceconv.read_unified(new)
    assert list(before.columns) == list(S.NAMES)
    assert before[list(S.ADDED_IN_2)].isna().all().all()
    kept = [n for n in S.NAMES if n not in S.ADDED_IN_2]
    # dictionary columns as their values (each file has a dictionary of its own, in its own order)
    assert _plain(before[kept]).equals(_plain(now[kept]))


def test_the_view_of_a_v1_file_has_every_column(pair: tuple[Path, Path]) -> None:
    old, _ = pair
    described = json.loads(_run("sql", "DESCRIBE events", str(old), "--format", "json").stdout)
    assert [r["column_name"] for r in described] == list(S.NAMES)
    counts = json.loads(
        _run("sql", "SELECT count(value) AS v, count(*) AS n FROM events", str(old), "--format", "json").stdout
    )
    assert counts[0]["v"] == 0 and counts[0]["n"] == pq.read_metadata(old).num_rows


@pytest.mark.parametrize("command", [["summary"], ["kernels"], ["kernels", "--per-launch"], ["ops", "--like", "torch"]])
def test_analyses_of_a_v1_file_equal_those_of_the_trace_converted_now(
    pair: tuple[Path, Path], command: list[str]
) -> None:
    old, new = pair
    if command[0] == "ops" and "graph_node" in old.name:
        pytest.skip("graph_node.sqlite has no autograd NVTX ranges: no operators for ops")
    got, want = (json.loads(_run(*command, str(p), "--format", "json").stdout) for p in (old, new))
    assert Path(got.pop("input", old.name)).name == Path(want.pop("input", new.name)).name == old.name
    if command == ["summary"]:  # occupancy is computed in v2; a v1 file has only Kineto's (whole percents)
        for was, now in zip(got["top_kernels"], want["top_kernels"], strict=True):
            before, after = was.pop("occupancy_pct"), now.pop("occupancy_pct")
            assert before is None or abs(before - after) < 1.0, was["name"]
        for d in (got, want):  # judged on the computed occupancy, which a v1 file lacks
            d["findings"] = [f for f in d["findings"] if f["code"] != "LOW_OCCUPANCY"]
    assert got == want


def test_a_timeline_from_a_v1_file(pair: tuple[Path, Path], tmp_path: Path) -> None:
    old, new = pair
    for p, name in ((old, "old"), (new, "new")):
        _run("perfetto", str(p), "-o", str(tmp_path / f"{name}.pftrace"))
    before, now = (read(tmp_path / f"{name}.pftrace") for name in ("old", "new"))
    assert _timeline(before) == _timeline(now) and before.slices


def _timeline(trace: Trace) -> tuple[list[tuple[Any, ...]], dict[tuple[str, ...], list[Any]]]:
    """Slices (track path, name, times, depth, arguments, flows) and counters, ids left out."""
    slices = sorted(
        (
            tuple(trace.path(s.track)),
            s.name,
            s.start,
            s.end,
            s.depth,
            sorted(s.args.items()),
            len(s.flow_out),
            len(s.flow_in),
        )
        for s in trace.slices
    )
    return slices, {tuple(trace.path(u)): [v for _, v in values] for u, values in trace.counters.items()}


def test_a_file_of_a_later_version_is_refused(tmp_path: Path) -> None:
    """Hand-made: the v1 file's footer claims version 3 (no such traceconv yet)."""
    table = pq.read_table(fixture("parquet/v1_seed_linear.parquet"))
    meta = {**(table.schema.metadata or {}), S.META_SCHEMA_VERSION: b"3"}
    later = tmp_path / "v3.parquet"
    pq.write_table(table.replace_schema_metadata(meta), later)
    for command in (["summary"], ["sql", "SELECT 1"]):
        args = [*command[:1], *command[1:], str(later)]
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 4, result.output
        assert "schema v3" in result.stderr and "reads v1, v2" in result.stderr, result.stderr
    with pytest.raises(traceconv.errors.SchemaVersionError):
        traceconv.read_unified(later)
