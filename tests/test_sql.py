"""``traceconv sql`` (issue 17): DuckDB's SQL over the unified events of Parquet files, dataset
directories and traces; the example queries of docs/sql.md checked against independent computations."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import traceconv
from traceconv.cli import main

from .conftest import fixture

ROOT = Path(__file__).resolve().parents[1]
PYTORCH = "pytorch/h200/train_buggy.pt.trace.json.gz"
NSYS = "nsys/h200/buggy.sqlite"
RANKS = ("pytorch/h200/ddp_rank0.pt.trace.json", "pytorch/h200/ddp_rank1.pt.trace.json")


def _examples() -> list[str]:
    """The ```sql blocks of `traceconv sql`'s page (docs/sql.md), in order."""
    return re.findall(r"```sql\n(.*?)```", (ROOT / "docs" / "sql.md").read_text(), re.S)


def _sql(*args: str, ok: bool = True) -> Any:
    result = CliRunner().invoke(main, ["sql", *args])
    if ok:
        assert result.exit_code == 0, result.output
    return result


def _json(query: str, *inputs: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads(_sql(query, *map(str, inputs), "--format", "json").stdout)
    return rows


@pytest.fixture(scope="module")
def parquet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sql") / "train_buggy.parquet"
    traceconv.convert(fixture(PYTORCH), out)
    return out


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ranks")
    for rel in RANKS:
        shutil.copy(fixture(rel), folder / Path(rel).name)
    return folder


def test_the_readme_has_the_three_examples() -> None:
    assert len(_examples()) == 3


@pytest.mark.parametrize("rel", [PYTORCH, NSYS])
def test_top_kernels_example_equals_the_events(rel: str) -> None:
    """Example 1 against a sum over traceconv.read's rows (a trace converted on the fly)."""
    table = traceconv.read(fixture(rel)).to_pylist()
    by_name: dict[str, list[int]] = defaultdict(list)
    for r in table:
        if r["kind"] == "kernel":
            by_name[r["name"]].append(r["dur_ns"])
    want = sorted(((round(sum(v) / 1e6, 3), n, len(v)) for n, v in by_name.items()), reverse=True)[:10]
    got = _json(_examples()[0], fixture(rel))
    assert [(r["gpu_ms"], r["launches"]) for r in got] == [(ms, count) for ms, _, count in want]
    assert {r["name"] for r in got} <= set(by_name)


@pytest.mark.parametrize("rel", [PYTORCH, NSYS])
def test_gpu_time_per_range_example_equals_a_scan(rel: str) -> None:
    """Example 2 against a plain scan: every GPU row launched inside a range on its thread."""
    rows = traceconv.read(fixture(rel)).to_pylist()
    ranges = [r for r in rows if r["kind"] == "nvtx" and r["start_ns"] is not None and r["end_ns"] is not None]
    gpu = [r for r in rows if r["kind"] in ("kernel", "memcpy", "memset") and r["launch_start_ns"] is not None]
    total: dict[str, int] = defaultdict(int)
    for r in ranges:
        for g in gpu:
            if (
                g["trace_id"] == r["trace_id"]
                and g["launch_tid"] == r["tid"]
                and r["start_ns"] <= g["launch_start_ns"] < r["end_ns"]
            ):
                total[r["name"]] += g["dur_ns"]
    assert total, "the trace has ranges with GPU work"
    got = _json(_examples()[1], fixture(rel))
    top = sorted(total.values(), reverse=True)[: len(got)]
    assert [r["gpu_ms"] for r in got] == [round(v / 1e6, 3) for v in top]
    for r in got:
        assert r["gpu_ms"] == round(total[r["range"]] / 1e6, 3)


def test_copies_per_rank_example_on_a_folder_of_rank_traces(ranks: Path) -> None:
    """Example 3 on a directory of two rank traces (converted on the fly): one row per rank and direction."""
    want: dict[tuple[int, str], list[int]] = defaultdict(lambda: [0, 0])
    for trace in sorted(ranks.iterdir()):
        for r in traceconv.read(trace).to_pylist():
            if r["kind"] == "memcpy":
                cell = want[(r["rank"], r["copy_kind"])]
                cell[0] += 1
                cell[1] += r["bytes"]
    got = _json(_examples()[2], ranks)
    assert {(r["rank"], r["copy_kind"]): [r["copies"], r["mb"]] for r in got} == {
        k: [n, round(b / 1e6, 3)] for k, (n, b) in want.items()
    }
    assert {r["rank"] for r in got} == {0, 1}


def test_formats_agree(parquet: Path) -> None:
    query = "SELECT kind, count(*) AS n, sum(dur_ns) AS ns FROM events GROUP BY kind ORDER BY kind"
    rows = _json(query, parquet)
    as_csv = list(csv.DictReader(io.StringIO(_sql(query, str(parquet), "--format", "csv").stdout)))
    assert [(r["kind"], int(r["n"])) for r in as_csv] == [(r["kind"], r["n"]) for r in rows]
    assert [int(r["ns"]) if r["ns"] else None for r in as_csv] == [r["ns"] for r in rows]
    table = _sql(query, str(parquet)).stdout.splitlines()
    assert table[0].split() == ["kind", "n", "ns"]
    assert table[-1] == f"({len(rows)} rows)"
    assert len(table) == len(rows) + 3
    assert sum(r["n"] for r in rows) == traceconv.read_table(parquet).num_rows


def test_a_table_shows_the_limit_and_counts_every_row(parquet: Path) -> None:
    n = traceconv.read_table(parquet).num_rows
    lines = _sql("SELECT event_id FROM events", str(parquet), "--limit", "5").stdout.splitlines()
    assert len(lines) == 2 + 5 + 1
    assert lines[-1].startswith(f"({n:,} rows; 5 shown")
    assert len(_sql("SELECT event_id FROM events", str(parquet), "--format", "csv").stdout.splitlines()) == n + 1


def test_several_inputs_of_different_sources_are_one_view(parquet: Path) -> None:
    nsys = fixture(NSYS)
    rows = _json("SELECT source, count(*) AS n FROM events GROUP BY source ORDER BY source", parquet, nsys)
    assert [r["source"] for r in rows] == ["nsys", "pytorch"]
    assert rows[1]["n"] == traceconv.read_table(parquet).num_rows
    assert rows[0]["n"] == traceconv.read(nsys).num_rows


def test_query_from_a_file_and_from_stdin(parquet: Path, tmp_path: Path) -> None:
    query = "SELECT count(*) AS n FROM events WHERE kind = 'kernel'"
    (tmp_path / "q.sql").write_text(query)
    want = _json(query, parquet)
    assert json.loads(_sql(f"@{tmp_path / 'q.sql'}", str(parquet), "--format", "json").stdout) == want
    result = CliRunner().invoke(main, ["sql", "-", str(parquet), "--format", "json"], input=query)
    assert result.exit_code == 0 and json.loads(result.stdout) == want


def test_sums_beyond_int64_and_decimals_are_written(parquet: Path) -> None:
    """DuckDB sums BIGINT as HUGEINT (a Decimal in Python): JSON and CSV still give the exact integer."""
    rows = _json("SELECT sum(start_ns) AS s, avg(dur_ns)::DECIMAL(18, 3) AS d FROM events", parquet)
    want = sum(v for v in traceconv.read_table(parquet)["start_ns"].to_pylist() if v is not None)
    assert rows[0]["s"] == want and isinstance(rows[0]["d"], float)


@pytest.mark.parametrize(
    "args, words",
    [
        (["SELECT nme FROM events"], ["nme", "DESCRIBE events"]),
        (["SELECT * FROM nowhere"], ["nowhere"]),
        (["   "], ["empty"]),
    ],
)
def test_a_bad_query_is_one_line_and_exit_2(parquet: Path, args: list[str], words: list[str]) -> None:
    result = _sql(*args, str(parquet), ok=False)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("traceconv: error:"), result.stderr
    assert all(w in lines[0] for w in words)
    assert "Traceback" not in result.output


def test_missing_input_and_query_file(tmp_path: Path, parquet: Path) -> None:
    result = _sql("SELECT 1", str(tmp_path / "none.parquet"), ok=False)
    assert result.exit_code == 3 and "none.parquet" in result.stderr and "does not exist" in result.stderr
    result = _sql(f"@{tmp_path / 'none.sql'}", str(parquet), ok=False)
    assert result.exit_code == 3 and "none.sql" in result.stderr


def test_traces_converted_on_the_fly_leave_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    _sql("SELECT count(*) FROM events", str(fixture(PYTORCH)))
    assert list(tmp_path.iterdir()) == []
    _sql("SELECT nme FROM events", str(fixture(PYTORCH)), ok=False)
    assert list(tmp_path.iterdir()) == []


def test_no_progress_bar_in_the_output() -> None:
    """DuckDB draws a progress bar on stdout for a long query where Python looks interactive
    (python -c, notebooks): off, so that it never lands inside a command's output."""
    code = (
        "import pyarrow as pa; from traceconv.analyses.source import Source; "
        "print(Source(pa.table({'t': [1]})).scalar(\"SELECT current_setting('enable_progress_bar')\"))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.strip() == "False"


def test_the_scratch_database_is_written_without_waiting_for_the_disk() -> None:
    """The work database holds only what an analysis materialises and is removed with the Source:
    no fsync (the 16x summary ~0.1 s faster, bench/README.md); its tables are still queried."""
    from traceconv.analyses.source import Source

    with Source(traceconv.read(fixture(PYTORCH))) as source:
        if source.scalar("SELECT count(*) FROM duckdb_settings() WHERE name = 'fsync_mode'"):  # DuckDB has it
            assert str(source.scalar("SELECT current_setting('fsync_mode')")).lower() == "none"
        source.table("kinds", "SELECT kind, count(*) AS n FROM events GROUP BY kind")
        assert source.scalar("SELECT sum(n) FROM kinds") == source.scalar("SELECT count(*) FROM events")
