"""Reader options are capabilities: one a reader cannot use is named, never dropped without a word."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import traceconv
from traceconv.cli import main
from traceconv.readers import REGISTRY, open_reader

from .conftest import fixture

FIXED = fixture("nsys/h200/fixed.sqlite")


def test_salvage_for_an_nsys_export_is_a_note_that_names_it(tmp_path: Path) -> None:
    out = tmp_path / "fixed.parquet"
    result = CliRunner().invoke(main, ["ingest", str(FIXED), "--salvage", "-o", str(out)])
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if "--salvage" in line]
    assert notes == [
        f"traceconv: note: {FIXED}: --salvage does not apply to Nsight Systems exports and reports "
        "(a damaged SQLite export is refused whole, with the reason); ignored"
    ]
    assert out.exists()


def test_options_a_pytorch_trace_takes_make_no_note(tmp_path: Path) -> None:
    trace = fixture("pytorch/h200/cuda_graph.json")
    result = CliRunner().invoke(
        main, ["ingest", str(trace), "--salvage", "--workers", "0", "-o", str(tmp_path / "x.parquet")]
    )
    assert result.exit_code == 0, result.output
    assert "note:" not in result.stderr


def test_the_library_reports_ignored_options_on_the_result(tmp_path: Path) -> None:
    result = traceconv.convert(FIXED, tmp_path / "f.parquet", salvage=True, workers=2)
    assert result.info.ignored == ["salvage", "workers"]


@pytest.mark.parametrize("fmt", sorted(REGISTRY))
def test_every_reader_declares_the_options_its_constructor_takes(fmt: str) -> None:
    import importlib
    import inspect

    module, name = REGISTRY[fmt]
    cls = getattr(importlib.import_module(module), name)
    taken = set(inspect.signature(cls).parameters) - {"path", "progress"}
    assert taken == cls.OPTIONS


def test_open_reader_passes_only_declared_options() -> None:
    reader = open_reader(FIXED, include_environment=False, salvage=True)
    assert reader.info.ignored == ["salvage"]
