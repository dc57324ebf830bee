"""The PyTorch reader on every real trace of the corpus, checked against an independent JSON reading."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import traceconv
from traceconv import schema as S
from traceconv.readers.pytorch.reader import PytorchReader

from .conftest import fixture, fixture_files, real_files
from .kineto_truth import expected_kind, load, to_ns

TRACES = real_files("pytorch", ("*.json", "*.json.gz"))
NS_RESOLUTION = (
    "pytorch/public/facebookresearch__HolisticTraceAnalysis__tests_data_ns_resolution_trace_rank-0"
    ".Apr_03_18_51_38.1102.pt.trace.json.gz"
)


def _ids(path: Path) -> str:
    return path.name[:60]


@pytest.mark.parametrize("path", TRACES, ids=_ids)
def test_rows_per_kind_equal_input_events(path: Path, tmp_path: Path) -> None:
    doc = load(path)
    expected = Counter(expected_kind(e) for e in doc["traceEvents"])
    out = tmp_path / "t.parquet"
    result = traceconv.convert(path, out)
    table = pq.read_table(out)
    got = Counter(table["kind"].to_pylist())
    assert got == expected
    assert result.rows == len(doc["traceEvents"]) == table.num_rows


@pytest.mark.parametrize("path", TRACES, ids=_ids)
def test_timestamps_exact_to_the_nanosecond(path: Path) -> None:
    doc = load(path)
    base = int(doc.get("baseTimeNanoseconds") or 0)
    table = traceconv.read(path)
    starts = table["start_ns"].to_pylist()
    durs = table["dur_ns"].to_pylist()
    for i, event in enumerate(doc["traceEvents"]):
        ts = to_ns(event.get("ts"))
        assert starts[i] == (None if ts is None else ts + base), (i, event)
        if event.get("ph") == "X" and "dur" in event:
            assert durs[i] == to_ns(event["dur"]), (i, event)


def _int64(value: Any) -> int | None:
    return value if type(value) is int and -(2**63) <= value < 2**63 else None


@pytest.mark.parametrize("path", TRACES, ids=_ids)
def test_correlation_and_external_ids_are_the_arguments(path: Path) -> None:
    """Each row's ids are its event's arguments ("External id" in any capitals, "correlation"),
    for the kinds that carry them, read independently with the standard json module."""
    doc = load(path)
    table = traceconv.read(path)
    got = list(zip(table["external_id"].to_pylist(), table["correlation_id"].to_pylist(), strict=True))
    for i, event in enumerate(doc["traceEvents"]):
        args = event.get("args") if isinstance(event.get("args"), dict) else {}
        kind = expected_kind(event)
        ext = next((v for k, v in args.items() if k.lower() == "external id"), None)
        want = (
            _int64(ext) if kind not in ("python", "memory") else None,
            _int64(args.get("correlation")) if kind not in ("python", "memory", "cpu_op") else None,
        )
        assert got[i] == want, (i, event)


def test_absolute_fractional_microseconds_keep_every_digit() -> None:
    table = traceconv.read(fixture(NS_RESOLUTION))
    meta = table.schema.metadata
    assert meta[S.META_TIME_BASE] == b"unix_epoch"
    starts = set(table["start_ns"].to_pylist())
    assert 1712195495519689047 in starts  # written as 1712195495519689.047


def test_relative_time_becomes_epoch_with_base() -> None:
    table = traceconv.read(fixture("pytorch/h200/cuda_graph.json"))
    assert table.schema.metadata[S.META_TIME_BASE] == b"unix_epoch"
    # "ts": 5127636769958.963 + "baseTimeNanoseconds": 1790857026000000000
    assert table["start_ns"][0].as_py() == 1790857026000000000 + 5127636769958963


def test_legacy_trace_string_streams_and_categories() -> None:
    path = fixture(
        "pytorch/public/facebookresearch__HolisticTraceAnalysis__tests_data_trace_file_list_inference_rank_1.json.gz"
    )
    table = traceconv.read(path).to_pandas()
    kernels = table[table["kind"] == "kernel"]
    assert len(kernels) == 4
    assert kernels["category"].astype(str).eq("Kernel").all()
    assert kernels["stream"].notna().all()
    assert kernels["launch_name"].notna().all()


def test_cupti_overhead_rows_are_kind_overhead() -> None:
    """Kineto's `overhead` category (CUPTI's own work, pid -1) is the kind that nsys's PROFILER_OVERHEAD gets."""
    table = traceconv.read(fixture("pytorch/h200/seed_linear.json")).to_pandas()
    overhead = table[table["kind"] == "overhead"]
    assert len(overhead) == 8 and overhead["category"].astype(str).eq("overhead").all()
    assert set(overhead["name"].astype(str)) >= {"Activity Buffer Request", "Runtime Triggered Module Loading"}
    assert overhead["pid"].eq(-1).all() and overhead["dur_ns"].gt(0).all()


def test_integer_past_int64_survives_in_args() -> None:
    path = fixture(
        "pytorch/public/facebookresearch__HolisticTraceAnalysis__tests_data_large_integer_trace_rank-70.Mar_25_20_48_12.2861.pt.trace.json.gz"
    )
    table = traceconv.read(path)
    args = [a for a in table["args"].to_pylist() if a]
    assert any("10159970886766084423" in a for a in args)


def test_schema_in_file_equals_documented(tmp_path: Path) -> None:
    out = tmp_path / "t.parquet"
    traceconv.convert(fixture("pytorch/h200/streams_memcpy.json"), out)
    assert pq.read_schema(out).remove_metadata().equals(S.SCHEMA)
    assert traceconv.trace_metadata(out)["schema_version"] == S.SCHEMA_VERSION


def test_duckdb_and_pandas_read_the_output(tmp_path: Path) -> None:
    duckdb = pytest.importorskip("duckdb")
    out = tmp_path / "t.parquet"
    traceconv.convert(fixture("pytorch/h200/streams_memcpy.json"), out)
    rows = duckdb.sql(f"SELECT kind, count(*) FROM read_parquet('{out}') GROUP BY kind").fetchall()
    assert dict(rows)["memcpy"] == 16
    df = traceconv.read_unified(out, kinds=["memcpy"], columns=["copy_kind", "bytes", "src_kind"])
    assert set(df["copy_kind"].astype(str)) <= set(S.COPY_KINDS)
    assert (df["bytes"] > 0).all()


def test_trace_metadata_goes_into_parquet_metadata(tmp_path: Path) -> None:
    out = tmp_path / "t.parquet"
    traceconv.convert(fixture("pytorch/h200/streams_memcpy.json"), out)
    meta = traceconv.trace_metadata(out)
    assert meta["trace"]["deviceProperties"][0]["name"] == "NVIDIA H200"
    assert "cupti_version" in meta["trace"]
    assert meta["source"] == "pytorch"


def test_chunked_and_whole_reads_are_identical() -> None:
    path = fixture("pytorch/h200/train_buggy.pt.trace.json.gz")
    whole = pa.concat_tables(PytorchReader(path).tables())
    chunked = pa.concat_tables(PytorchReader(path, chunk_size=64 << 10).tables())
    assert chunked.num_rows == whole.num_rows
    for name in S.NAMES:
        assert chunked[name].to_pylist() == whole[name].to_pylist(), name


def test_launch_and_operator_links_on_h200_trace() -> None:
    doc = load(fixture("pytorch/h200/streams_memcpy.json"))
    events = doc["traceEvents"]
    runtime = {
        e["args"]["correlation"]: e
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    table = traceconv.read(fixture("pytorch/h200/streams_memcpy.json"))
    rows = table.to_pylist()
    checked = 0
    for i, e in enumerate(events):
        if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        launch = runtime.get(e["args"].get("correlation"))
        row = rows[i]
        if launch is None:
            assert row["launch_name"] is None
            continue
        assert row["launch_name"] == launch["name"]
        assert row["launch_start_ns"] - int(doc["baseTimeNanoseconds"]) == to_ns(launch["ts"])
        checked += 1
        assert row["op_name"] is not None
    assert checked >= 30


def test_directory_becomes_dataset(tmp_path: Path) -> None:
    src = tmp_path / "run"
    src.mkdir()
    for name in ("cuda_graph.json", "streams_memcpy.json"):
        (src / name).write_bytes(fixture(f"pytorch/h200/{name}").read_bytes())
    from click.testing import CliRunner

    from traceconv.cli import main

    res = CliRunner().invoke(main, ["ingest", str(src)])
    assert res.exit_code == 0, res.output
    out = tmp_path / "run.parquet"
    assert sorted(p.name for p in out.iterdir()) == ["cuda_graph.parquet", "streams_memcpy.parquet"]
    df = traceconv.read_unified(out)
    assert set(df["trace_id"].astype(str)) == {"cuda_graph", "streams_memcpy"}
    assert len(df) == 208 + 417


@pytest.mark.parametrize("path", TRACES, ids=_ids)
def test_operator_links_enclose_the_launch(path: Path) -> None:
    """Every API call's operator is a CPU-side range on its thread that contains the call's start."""
    df = traceconv.read(path).to_pandas()
    rows = df.set_index("event_id")
    api = df[(df["kind"] == "cuda_api") & df["op_event_id"].notna()]
    ops = rows.loc[api["op_event_id"].astype("int64")]
    assert set(ops["kind"].astype(str)) <= {"cpu_op", "nvtx"}
    same_thread = (
        ops["tid"].astype(object).fillna(ops["tid_label"].astype(object)).to_numpy()
        == api["tid"].astype(object).fillna(api["tid_label"].astype(object)).to_numpy()
    )
    assert same_thread.all()
    assert (ops["start_ns"].to_numpy() <= api["start_ns"].to_numpy()).all()
    assert (api["start_ns"].to_numpy() <= ops["end_ns"].to_numpy()).all()
    # GPU rows carry their launching call's operator
    gpu = df[df["kind"].isin(["kernel", "memcpy", "memset"]) & df["launch_event_id"].notna()]
    launches = rows.loc[gpu["launch_event_id"].astype("int64")]
    assert (launches["op_event_id"].fillna(-1).to_numpy() == gpu["op_event_id"].fillna(-1).to_numpy()).all()


def _expected_operators(df: Any) -> tuple[list[set[int]], Counter[str]]:
    """Each API call's operator by the documented rules, found by brute force: the operators its
    External id names that enclose it on its thread (when the id is not its correlation id); else
    the innermost enclosing ``cpu_op`` (latest start, then earliest end); else the innermost
    enclosing user annotation. Equal ranges tie: any of them is right."""
    thread = [df[c].astype(object).fillna(df[c + "_label"].astype(object)).astype(str) for c in ("pid", "tid")]
    key = (thread[0] + "/" + thread[1]).to_numpy()
    start, end = df["start_ns"].to_numpy("int64"), df["end_ns"].fillna(-1).to_numpy("int64")
    ext = df["external_id"].fillna(-1).to_numpy("int64")
    corr = df["correlation_id"].fillna(-1).to_numpy("int64")
    eid = df["event_id"].to_numpy("int64")
    kind = df["kind"].astype(str).to_numpy()
    annotation = df["category"].astype(str).str.lower().to_numpy() == "user_annotation"
    is_op = ((kind == "cpu_op") | annotation) & (end >= start)
    ops_of = {k: np.flatnonzero(is_op & (key == k)) for k in set(key[kind == "cuda_api"])}
    expected: list[set[int]] = []
    rules: Counter[str] = Counter()
    for i in np.flatnonzero(kind == "cuda_api"):
        ops = ops_of[key[i]]
        ops = ops[(start[ops] <= start[i]) & (start[i] <= end[ops])]  # the operators enclosing the call
        named = ops[ext[ops] == ext[i]] if ext[i] >= 0 and ext[i] != corr[i] else ops[:0]
        if len(named):
            rules["external id"] += 1
            expected.append(set(eid[named].tolist()))
            continue
        for rule, pool in (("cpu_op", ops[kind[ops] == "cpu_op"]), ("annotation", ops[annotation[ops]])):
            if len(pool):
                latest = pool[start[pool] == start[pool].max()]
                innermost = latest[end[latest] == end[latest].min()]
                rules[rule] += 1
                expected.append(set(eid[innermost].tolist()))
                break
        else:
            rules["none"] += 1
            expected.append(set())
    return expected, rules


@pytest.mark.parametrize("path", TRACES, ids=_ids)
def test_operator_is_the_one_the_rules_choose(path: Path) -> None:
    df = traceconv.read(path).to_pandas()
    expected, rules = _expected_operators(df)
    got = df.loc[df["kind"] == "cuda_api", "op_event_id"].to_numpy()
    wrong = [(g, e) for g, e in zip(got, expected, strict=True) if not _agrees(g, e)]
    assert not wrong, (rules, wrong[:5])


def _agrees(got: Any, expected: set[int]) -> bool:
    return (got is pd.NA or pd.isna(got)) if not expected else (not pd.isna(got) and int(got) in expected)


def test_operator_rules_are_all_exercised() -> None:
    """The fixtures have API calls that each rule decides (else the test above proves little)."""
    seen: Counter[str] = Counter()
    rules = ("external id", "cpu_op", "annotation", "none")
    for path in sorted(fixture_files("pytorch", ("*.json", "*.json.gz")), key=lambda p: p.stat().st_size):
        seen += _expected_operators(traceconv.read(path).to_pandas())[1]
        if all(seen[rule] > 0 for rule in rules):  # the smallest fixtures that do it are enough
            break
    assert all(seen[rule] > 0 for rule in rules), seen


def test_operator_preferences_hand_made(tmp_path: Path) -> None:
    """Hand-made (no real trace has an External id naming an outer operator): the named operator
    beats the innermost cpu_op, which beats an enclosing annotation, which is kept for calls that
    no cpu_op encloses."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "outer", "ts": 0, "dur": 100, "args": {"External id": 5}},
        {"ph": "X", "cat": "cpu_op", "name": "inner", "ts": 10, "dur": 50, "args": {"External id": 6}},
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "named",
            "ts": 20,
            "dur": 5,
            "args": {"External id": 5, "correlation": 9},
        },
        {"ph": "X", "cat": "cuda_runtime", "name": "enclosed", "ts": 30, "dur": 5, "args": {"correlation": 10}},
        {"ph": "X", "cat": "user_annotation", "name": "step", "ts": 0, "dur": 500, "args": {}},
        {"ph": "X", "cat": "cuda_runtime", "name": "annotated", "ts": 200, "dur": 5, "args": {"correlation": 11}},
    ]
    path = tmp_path / "preferences.json"
    path.write_text(json.dumps({"traceEvents": [{"pid": 1, "tid": 1, **e} for e in events]}))
    rows = pa.concat_tables(PytorchReader(path, workers=0).tables()).to_pylist()
    by_name = {r["name"]: r for r in rows}
    assert {r["name"]: r["op_name"] for r in rows if r["kind"] == "cuda_api"} == {
        "named": "outer",
        "enclosed": "inner",
        "annotated": "step",
    }
    assert by_name["named"]["op_event_id"] == by_name["outer"]["event_id"]


def test_modern_external_ids_name_the_operator() -> None:
    """Since late 2024 External id is reliable: the resolved operator has the call's External id."""
    df = traceconv.read(fixture("pytorch/h200/train_buggy.pt.trace.json.gz")).to_pandas()
    rows = df.set_index("event_id")
    api = df[(df["kind"] == "cuda_api") & df["external_id"].notna() & df["op_event_id"].notna()]
    assert len(api) > 1000
    ops = rows.loc[api["op_event_id"].astype("int64")]
    assert (ops["external_id"].to_numpy() == api["external_id"].to_numpy()).all()


@pytest.mark.parametrize(
    ("name", "rank"),
    [
        ("public/facebookresearch__HolisticTraceAnalysis__tests_data_trace_file_list_inference_rank_1.json.gz", 1),
        ("h200/seed_linear.json", None),
    ],
)
def test_every_row_names_its_trace_and_rank(name: str, rank: int | None) -> None:
    path = fixture(f"pytorch/{name}")
    table = pa.concat_tables(PytorchReader(path, workers=0).tables())
    assert table.num_rows > 0
    assert table["source"].cast(pa.string()).unique().to_pylist() == ["pytorch"]
    assert table["trace_id"].cast(pa.string()).unique().to_pylist() == [path.name.split(".")[0]]
    assert table["rank"].unique().to_pylist() == [rank]


def test_thread_pairs_from_32_bit_ids() -> None:
    """The link index keeps pids and tids in 32 bits where they fit; packing a pair into one
    64-bit key must widen them first (int32 << 32 would overflow)."""
    from traceconv.readers.pytorch.operators import id_type, unique_pairs

    pid = np.array([7, 7, 2**31 - 1, 7], dtype=np.int32)
    tid = np.array([2**31 - 1, -5, 3, 2**31 - 1], dtype=np.int32)
    pairs, inverse = unique_pairs(pid, tid)
    assert [pairs[i] for i in inverse] == [(7, 2**31 - 1), (7, -5), (2**31 - 1, 3), (7, 2**31 - 1)]
    assert id_type(2**31 - 1) is np.int32 and id_type(2**31) is np.int64


def test_text_is_compares_each_distinct_value_once() -> None:
    from traceconv.readers.arrow_util import text_is

    values = pa.array(["user_annotation", None, "User_Annotation", "cpu_op", "user_annotation"])
    for arr in (values, values.dictionary_encode(), pa.chunked_array([values.slice(0, 2), values.slice(2)])):
        assert text_is(arr, "user_annotation").tolist() == [True, False, False, False, True]
        assert text_is(arr, "user_annotation", fold=True).tolist() == [True, False, True, False, True]
        assert not text_is(arr, "kernel").any()
