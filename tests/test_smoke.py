"""The bundled demo trace converts end to end (a fuller suite lives beside this file)."""

from pathlib import Path

import traceconv

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def test_demo_trace_converts(tmp_path: Path) -> None:
    out = tmp_path / "t.parquet"
    result = traceconv.convert(FIXTURES / "pytorch" / "cuda_graph.json", out)
    assert result.rows == 208
    df = traceconv.read_unified(out, kinds=["kernel"])
    assert len(df) == 21
    assert df["launch_name"].notna().all()
