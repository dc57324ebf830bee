"""The bundled demo trace converts end to end (a fuller suite lives beside this file)."""

from pathlib import Path

import traceconv

from .conftest import fixture


def test_demo_trace_converts(tmp_path: Path) -> None:
    out = tmp_path / "t.parquet"
    result = traceconv.convert(fixture("pytorch/h200/cuda_graph.json"), out)
    assert result.rows == 208
    df = traceconv.read_unified(out, kinds=["kernel"])
    assert len(df) == 21
    assert df["launch_name"].notna().all()


def test_every_analysis_reads_columns_of_the_schema() -> None:
    """The column lists the analyses load by name are names of traceconv.schema: one spelled
    otherwise would be read as missing (a null column) from files of any version."""
    from traceconv import schema as S
    from traceconv.analyses import kernels, key_averages, prepare

    for name, columns in [
        ("prepare", prepare.INPUT_COLUMNS),
        ("kernels", kernels.INPUT_COLUMNS),
        ("key_averages", key_averages.INPUT_COLUMNS),
    ]:
        assert set(columns) <= set(S.NAMES), (name, set(columns) - set(S.NAMES))
