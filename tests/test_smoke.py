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
