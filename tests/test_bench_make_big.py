"""bench/make_big.py: a trace repeated N times stays a valid trace whose copies link like the original."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import traceconv

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "fixtures" / "pytorch" / "h200" / "cuda_graph.json"


def _make_big() -> Any:
    spec = importlib.util.spec_from_file_location("make_big", ROOT / "bench" / "make_big.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _ids(events: list[dict[str, Any]], key: str) -> list[int]:
    return [e["args"][key] for e in events if key in e.get("args", {})]


def test_three_copies_follow_each_other_with_unique_ids(tmp_path: Path) -> None:
    out = tmp_path / "x3.json"
    _make_big().make(SOURCE, out, 3)

    original, big = json.loads(SOURCE.read_text()), json.loads(out.read_text())
    assert {k: v for k, v in big.items() if k != "traceEvents"} == {
        k: v for k, v in original.items() if k != "traceEvents"
    }
    n = len(original["traceEvents"])
    copies = [big["traceEvents"][k * n : (k + 1) * n] for k in range(3)]
    assert len(big["traceEvents"]) == 3 * n
    assert all([e["name"] for e in c] == [e["name"] for e in original["traceEvents"]] for c in copies)

    def span(c: list[dict[str, Any]]) -> tuple[float, float]:
        return min(e["ts"] for e in c if e.get("ts", 0) > 0), max(e.get("ts", 0) + e.get("dur", 0) for e in c)

    spans = [span(c) for c in copies]  # each copy starts after the previous one has ended
    assert spans[0][1] < spans[1][0] and spans[1][1] < spans[2][0]
    for key in ("correlation", "External id"):
        ids = _ids(big["traceEvents"], key)
        per_copy = [set(_ids(c, key)) for c in copies]
        assert len(ids) == 3 * len(_ids(original["traceEvents"], key))
        assert not (per_copy[0] & per_copy[1]) and not (per_copy[1] & per_copy[2])


def test_copies_convert_with_the_same_links(tmp_path: Path) -> None:
    out = tmp_path / "x3.json"
    _make_big().make(SOURCE, out, 3)

    one = traceconv.read(SOURCE).to_pandas()
    three = traceconv.read(out).to_pandas()
    assert len(three) == 3 * len(one)
    for col in ("launch_name", "op_name"):
        assert three[col].notna().sum() == 3 * one[col].notna().sum() > 0


def test_span_of_a_longer_trace_moves_the_copies_in_step_with_it(tmp_path: Path) -> None:
    """The ranks bench input: rank 1 repeated at rank 0's (longer) span, so collectives keep lining up."""
    from .conftest import fixture

    rank0, rank1 = fixture("pytorch/h200/ddp_rank0.pt.trace.json"), fixture("pytorch/h200/ddp_rank1.pt.trace.json")
    mb = _make_big()
    own, longer = mb.measure(rank1, *mb.events_span(rank1))[0], mb.measure(rank0, *mb.events_span(rank0))[0]
    assert longer > own
    out = tmp_path / "r1x2.json"
    mb.make(rank1, out, 2, span_of=(rank0,))
    events = json.loads(out.read_text())["traceEvents"]
    n = len(json.loads(rank1.read_text())["traceEvents"])
    first = min(e["ts"] for e in events[:n] if e.get("ts", 0) > 0)
    second = min(e["ts"] for e in events[n:] if e.get("ts", 0) > 0)
    assert round(second - first) == longer
