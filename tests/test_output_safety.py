"""Outputs never destroy data: an input is never written over, a file traceconv did not write is
replaced only with --force, and only ``.parquet`` names are written without it (issue 16)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner, Result

import traceconv
from traceconv.cli import main
from traceconv.errors import UsageError

from .conftest import fixture

TRACE = fixture("pytorch/h200/streams_memcpy.json")
EXPORT = fixture("nsys/h200/graph_whole.sqlite")


def _run(*args: object) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args])


def _copy(src: Path, folder: Path) -> Path:
    folder.mkdir(exist_ok=True)
    return Path(shutil.copy(src, folder / src.name))


@pytest.mark.parametrize("command, src", [("ingest", TRACE), ("nsys", EXPORT), ("ingest", EXPORT)])
def test_an_input_given_as_its_own_output_survives(tmp_path: Path, command: str, src: Path) -> None:
    path = _copy(src, tmp_path)
    before = path.read_bytes()
    result = _run(command, path, "-o", path)
    assert result.exit_code == 2, result.output
    said = f"traceconv: error: {path}: is an input of this command: writing there would destroy it"
    assert result.stderr == said + "; give -o another name\n"
    assert path.read_bytes() == before
    forced = _run(command, path, "-o", path, "--force")
    assert forced.exit_code == 2 and path.read_bytes() == before  # --force never reaches an input


def test_a_file_traceconv_did_not_write_is_replaced_only_with_force(tmp_path: Path) -> None:
    notes = tmp_path / "notes.parquet"
    pq.write_table(pa.table({"mine": [1, 2, 3]}), notes)  # a user's own Parquet file
    before = notes.read_bytes()
    result = _run("ingest", TRACE, "-o", notes)
    assert result.exit_code == 2 and "exists and is not a file traceconv wrote" in result.stderr
    assert "--force" in result.stderr and notes.read_bytes() == before
    assert _run("ingest", TRACE, "-o", notes, "--force").exit_code == 0
    assert traceconv.read_unified(notes).shape[0] == 417


def test_the_default_output_beside_the_trace_is_checked_too(tmp_path: Path) -> None:
    path = _copy(TRACE, tmp_path)
    beside = tmp_path / "streams_memcpy.parquet"
    beside.write_text("my notes\n")
    result = _run("ingest", path)
    assert result.exit_code == 2 and beside.read_text() == "my notes\n"


def test_a_traceconv_output_is_replaced_by_a_new_conversion(tmp_path: Path) -> None:
    out = tmp_path / "t.parquet"
    assert _run("ingest", TRACE, "-o", out).exit_code == 0
    again = _run("ingest", TRACE, "-o", out)
    assert again.exit_code == 0, again.output


@pytest.mark.parametrize("name", ["out.csv", "notes.json", "trace"])
def test_a_name_that_is_not_parquet_is_a_usage_error_unless_forced(tmp_path: Path, name: str) -> None:
    out = tmp_path / name
    result = _run("ingest", TRACE, "-o", out)
    assert result.exit_code == 2
    assert result.stderr == (
        f"traceconv: error: {out}: does not end in .parquet, but traceconv writes Parquet there; "
        "name it .parquet, or give --force\n"
    )
    assert not out.exists()
    assert _run("ingest", TRACE, "-o", out, "--force").exit_code == 0 and out.read_bytes()[:4] == b"PAR1"


def test_a_foreign_json_file_survives_o_without_force(tmp_path: Path) -> None:
    notes = tmp_path / "notes.json"
    notes.write_text('{"my": "notes"}')
    assert _run("ingest", TRACE, "-o", notes).exit_code == 2
    assert notes.read_text() == '{"my": "notes"}'
    forced = _run("ingest", TRACE, "-o", notes, "--force")  # not traceconv's, but the user insists
    assert forced.exit_code == 0 and notes.read_bytes()[:4] == b"PAR1"


def test_a_directory_of_traces_into_an_existing_file_is_a_usage_error(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _copy(TRACE, run)
    target = tmp_path / "existing.parquet"
    assert _run("ingest", TRACE, "-o", target).exit_code == 0
    result = _run("ingest", run, "-o", target)
    assert result.exit_code == 2, result.output
    assert "is a file, and the directory" in result.stderr and "internal error" not in result.stderr


def test_the_library_never_writes_over_its_input(tmp_path: Path) -> None:
    path = _copy(TRACE, tmp_path)
    with pytest.raises(UsageError, match="is an input"):
        traceconv.convert(path, path)
    assert path.read_bytes() == TRACE.read_bytes()


def test_steps_that_are_not_a_regular_expression_are_a_usage_error(tmp_path: Path) -> None:
    result = _run("summary", TRACE, "--steps", "(")
    assert result.exit_code == 2
    assert result.stderr.startswith("traceconv: error: --steps '(' is not a regular expression (")
    assert "internal error" not in result.stderr
