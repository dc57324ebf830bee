"""Every real export that comes with NVIDIA's own `nsys stats` output: traceconv's numbers equal NVIDIA's.

Pairs are found by name: `<stem>.sqlite` beside (or one folder above) `<stem>.cuda_kern_exec_trace.csv[.gz]`.
`fixtures/nsys/h200-extra/` holds exports made for this on the H200 machine (see its README).
"""

from __future__ import annotations

import csv
import gzip
import io
from pathlib import Path

import pytest

import traceconv
import traceconv.analyses.kernels as K

from .conftest import fixture_files, fixture_name


def _pairs() -> list[tuple[Path, Path]]:
    exports = {fixture_name(p): p for p in fixture_files("nsys", ("*.sqlite",))}
    found = []
    for trace_csv in fixture_files("nsys", ("*.cuda_kern_exec_trace.csv", "*.cuda_kern_exec_trace.csv.gz")):
        stem = trace_csv.name.split(".cuda_kern_exec_trace")[0]
        folder = fixture_name(trace_csv).parent
        for export in (folder / f"{stem}.sqlite", folder.parent / f"{stem}.sqlite"):
            if export in exports:
                found.append((exports[export], trace_csv))
                break
    return found


PAIRS = _pairs()


def _rows(path: Path) -> list[dict[str, str]]:
    raw = path.read_bytes()
    text = gzip.decompress(raw).decode() if path.suffix == ".gz" else raw.decode()
    return list(csv.DictReader(io.StringIO(text)))


def _int(text: str) -> int | None:
    return int(text) if text not in ("", None) else None


def test_pairs_are_found() -> None:
    assert {p[0].name for p in PAIRS} >= {"fixed.sqlite", "train40.sqlite", "graph_node2.sqlite"}


@pytest.mark.parametrize(("export", "trace_csv"), PAIRS, ids=[p[0].stem for p in PAIRS])
def test_every_kernel_equals_cuda_kern_exec_trace(export: Path, trace_csv: Path) -> None:
    want = sorted(_rows(trace_csv), key=lambda r: (int(r["API Start (ns)"]), int(r["Kernel Start (ns)"])))
    ours = K.per_launch(traceconv.read(export))
    ours = ours[ours["launch_name"].notna()].sort_values(["api_start_ns", "kernel_start_ns"], kind="stable")
    assert len(ours) == len(want) > 0
    records = ours.astype(object).where(ours.notna(), None).to_dict("records")
    offset = records[0]["api_start_ns"] - int(want[0]["API Start (ns)"])  # session start -> Unix epoch
    for w, o in zip(want, records, strict=True):
        assert int(w["Kernel Start (ns)"]) + offset == o["kernel_start_ns"]
        assert _int(w["API Dur (ns)"]) == o["api_dur_ns"]
        assert _int(w["Queue Dur (ns)"]) == o["queue_dur_ns"]
        assert _int(w["Kernel Dur (ns)"]) == o["kernel_dur_ns"]
        assert _int(w["Total Dur (ns)"]) == o["total_dur_ns"]
        assert w["Kernel Name"] == o["name"]


@pytest.mark.parametrize(("export", "trace_csv"), PAIRS, ids=[p[0].stem for p in PAIRS])
def test_per_name_totals_equal_cuda_gpu_kern_sum(export: Path, trace_csv: Path) -> None:
    sums = trace_csv.with_name(trace_csv.name.replace("cuda_kern_exec_trace", "cuda_gpu_kern_sum"))
    if not sums.exists():
        pytest.skip("no cuda_gpu_kern_sum beside this export")
    want = {r["Name"]: r for r in _rows(sums)}
    got = K.summary(traceconv.read(export), by="name").set_index("name")
    assert set(got.index) == set(want)
    for name, w in want.items():
        o = got.loc[name]
        assert int(w["Instances"]) == o["count"]
        assert int(w["Total Time (ns)"]) == o["exec_total_ns"]
        assert int(w["Min (ns)"]) == o["exec_min_ns"] and int(w["Max (ns)"]) == o["exec_max_ns"]
        assert float(w["Med (ns)"]) == pytest.approx(o["exec_med_ns"], abs=0.05)
        assert float(w["StdDev (ns)"]) == pytest.approx(o["exec_std_ns"], abs=0.051)
