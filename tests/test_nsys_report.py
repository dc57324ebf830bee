"""Reports (.nsys-rep): finding nsys, the export command, the cache, and the errors without nsys.

No nsys runs here. ``fake_nsys`` is a hand-made stand-in: a script that logs its arguments
and writes a copy of the real buggy.sqlite (exported from buggy.nsys-rep by nsys 2025.3) to
the -o path. The real export is checked with the real nsys on the GPU machine.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

import traceconv
from traceconv.cli import main
from traceconv.errors import InputError, ToolMissingError
from traceconv.readers import sniff
from traceconv.readers.nsys import report as R

from .conftest import fixture

EXPORT = fixture("nsys/h200/buggy.sqlite")

FAKE = """#!{python}
import shutil, sys
with open({log!r}, "a") as fh:
    fh.write("\\x1f".join(sys.argv) + "\\n")
if {fail!r}:
    sys.stderr.write("Error: report version 3.99 is newer than this nsys\\n")
    sys.exit(1)
out = sys.argv[sys.argv.index("-o") + 1]
shutil.copy({export!r}, out)
"""


def fake_nsys(folder: Path, log: Path, fail: bool = False, name: str = "nsys", export: Path = EXPORT) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / name
    script.write_text(FAKE.format(python=sys.executable, log=str(log), fail=fail, export=str(export)))
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return script


def calls(log: Path) -> list[list[str]]:
    return [line.split("\x1f") for line in log.read_text().splitlines()] if log.exists() else []


@pytest.fixture
def report(tmp_path: Path) -> Path:
    path = tmp_path / "reports" / "buggy.nsys-rep"
    path.parent.mkdir()
    shutil.copy(fixture("nsys/h200/buggy.nsys-rep"), path)
    return path


@pytest.fixture
def no_nsys(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No nsys anywhere: empty PATH, no $NSYS, no install folders."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.delenv("NSYS", raising=False)
    monkeypatch.setattr(R, "SEARCH", ())


def test_a_report_is_exported_once_into_the_cache_and_read(
    report: Path, tmp_path: Path, no_nsys: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "calls.log"
    fake = fake_nsys(tmp_path / "bin", log)
    monkeypatch.setenv("PATH", str(fake.parent))
    assert sniff(report) == "nsys-report"
    first = traceconv.read(report)
    cache = report.parent / ".traceconv-cache" / "buggy.nsys-rep.sqlite"
    [argv] = calls(log)
    assert argv[0] == str(fake) and argv[1:7] == ["export", "--type", "sqlite", "--force-overwrite", "true", "-o"]
    assert Path(argv[7]).parent == cache.parent and argv[8] == str(report)
    assert cache.exists() and not [p for p in cache.parent.iterdir() if p != cache]  # the temporary name is gone
    assert first.equals(traceconv.read(EXPORT).replace_schema_metadata(first.schema.metadata))
    traceconv.read(report)
    assert len(calls(log)) == 1  # the cache is reused while newer than the report
    os.utime(report, (cache.stat().st_mtime + 10, cache.stat().st_mtime + 10))
    traceconv.read(report)
    assert len(calls(log)) == 2  # a newer report is exported again


def test_a_report_whose_export_is_out_of_order_is_exported_once_and_read_sorted(
    report: Path, tmp_path: Path, no_nsys: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hand-made: buggy.sqlite with its API calls stored in reverse, as the fake nsys's export. The
    conversion starts again with that table sorted by SQLite, from the cached export."""
    from traceconv.readers.nsys import batches

    reversed_export = tmp_path / "reversed.sqlite"
    shutil.copy(EXPORT, reversed_export)
    runtime = "CUPTI_ACTIVITY_KIND_RUNTIME"
    with sqlite3.connect(reversed_export) as db:
        db.execute(f"CREATE TABLE r AS SELECT * FROM {runtime} ORDER BY rowid DESC")
        db.execute(f"DELETE FROM {runtime}")
        db.execute(f"INSERT INTO {runtime} SELECT * FROM r")
        db.execute("DROP TABLE r")
    sorted_whole = traceconv.read(reversed_export)  # fewer rows than a batch: sorted in memory
    log = tmp_path / "calls.log"
    monkeypatch.setenv("PATH", str(fake_nsys(tmp_path / "bin", log, export=reversed_export).parent))
    monkeypatch.setattr(batches, "BATCH_ROWS", 1000)
    got = traceconv.read(report)
    assert len(calls(log)) == 1

    def values(table: pa.Table) -> pa.Table:  # batches have dictionaries of their own
        cols = [c.cast(c.type.value_type) if pa.types.is_dictionary(c.type) else c for c in table.columns]
        return pa.table(cols, names=table.column_names).drop_columns(["trace_id"])

    assert values(got).equals(values(sorted_whole))


def test_explicit_nsys_wins_over_env_which_wins_over_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    on_path = fake_nsys(tmp_path / "path-bin", tmp_path / "a.log")
    in_env = fake_nsys(tmp_path / "env-bin", tmp_path / "b.log")
    given = fake_nsys(tmp_path / "given-bin", tmp_path / "c.log")
    env = {"PATH": str(on_path.parent)}
    assert R.find_nsys(None, env, ()) == on_path
    assert R.find_nsys(None, {**env, "NSYS": str(in_env)}, ()) == in_env
    assert R.find_nsys(given, {**env, "NSYS": str(in_env)}, ()) == given


def test_install_folders_newest_version_first(tmp_path: Path) -> None:
    for version in ("2024.6.1", "2025.3.1", "2024.10.2"):
        fake_nsys(tmp_path / "opt" / "nvidia" / "nsight-systems" / version / "bin", tmp_path / "x.log")
    pattern = str(tmp_path / "opt" / "nvidia" / "nsight-systems" / "*" / "bin" / "nsys")
    found = R.find_nsys(None, {"PATH": str(tmp_path / "none")}, (pattern,))
    assert found is not None and found.parts[-3] == "2025.3.1"


def test_the_cli_passes_nsys_to_the_report_reader(report: Path, tmp_path: Path, no_nsys: None) -> None:
    log = tmp_path / "calls.log"
    fake = fake_nsys(tmp_path / "somewhere", log, name="my-nsys")
    out = tmp_path / "out.parquet"
    result = CliRunner().invoke(main, ["nsys", str(report), "--nsys", str(fake), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert calls(log)[0][0] == str(fake)
    assert traceconv.read_unified(out, kinds=["kernel"]).shape[0] == 1987


def test_without_nsys_the_error_gives_the_command_to_run_by_hand(report: Path, tmp_path: Path, no_nsys: None) -> None:
    with pytest.raises(ToolMissingError) as err:
        traceconv.read(report)
    assert f"nsys export --type sqlite --force-overwrite true -o {report.with_suffix('.sqlite')} {report}" in str(
        err.value
    )
    result = CliRunner().invoke(main, ["nsys", str(report), "-o", str(tmp_path / "out.parquet")])
    assert result.exit_code == 5
    assert result.output.startswith("traceconv: error: ") and "nsys export --type sqlite" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "out.parquet").exists()
    assert CliRunner().invoke(main, ["ingest", str(report)]).exit_code == 5


def test_a_failing_export_says_what_nsys_said(
    report: Path, tmp_path: Path, no_nsys: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = fake_nsys(tmp_path / "bin", tmp_path / "calls.log", fail=True)
    with pytest.raises(InputError, match=r"nsys export. failed \(exit 1\): Error: report version 3.99 is newer"):
        traceconv.read(report, nsys=fake)
    assert not list((report.parent / ".traceconv-cache").iterdir())


def test_an_unwritable_report_folder_caches_in_the_temp_folder(
    report: Path, tmp_path: Path, no_nsys: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    (report.parent / ".traceconv-cache").write_text("a file where the cache folder would go")
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    log = tmp_path / "calls.log"
    traceconv.read(report, nsys=fake_nsys(tmp_path / "bin", log))
    out = Path(calls(log)[0][7])
    assert out.parent.parent == tmp_path / "tmp" and out.parent.name.startswith("traceconv-cache")


def test_a_bad_nsys_option_is_a_usage_error(report: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["nsys", str(report), "--nsys", str(tmp_path / "missing")])
    assert result.exit_code == 2 and "is not an executable file" in result.output
