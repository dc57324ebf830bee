"""Launch, queue, execution and wall time per kernel (issue 4): `analyses.kernels` and `traceconv kernels`.

PyTorch: checked against an independent join of the JSON (runtime/driver calls to GPU work
by ``args.correlation``). Nsight Systems: checked against what NVIDIA's own ``nsys stats``
printed for the same export (``fixtures/nsys/nsys-stats``).
"""

from __future__ import annotations

import csv
import io
import json
import re
import sqlite3
import statistics
from collections import defaultdict
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import traceconv
from traceconv.analyses import kernels as K
from traceconv.analyses.common import load
from traceconv.cli import main

from .conftest import fixture, real_files
from .kineto_truth import load as load_json
from .kineto_truth import to_ns

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}
LAUNCH_CATS = {"cuda_runtime", "cuda_driver", "runtime"}
GPU_KINDS = ("kernel", "memcpy", "memset")
PYTORCH_TRACES = [
    fixture("pytorch/h200/cuda_graph.json"),
    fixture("pytorch/h200/compiled_triton.json"),
    fixture("pytorch/h200/streams_memcpy.json"),
    fixture(
        "pytorch/public/pytorch__kineto__tb_plugin_samples_resnet50_num_workers_0_worker0.1623143089861.pt.trace.json.gz"
    ),
    fixture(
        "pytorch/public/pytorch__kineto__tb_plugin_samples_resnet50_profiler_api_num_workers_0_worker0.pt.trace.json.gz"
    ),
    fixture("pytorch/public/AMD-AGI__TraceLens__tests_traces_mi300_resnet_act_checkpoint.json.gz"),
]
FIXED_SQLITE = fixture("nsys/h200/fixed.sqlite")


# -- PyTorch: an independent join ------------------------------------------------------------
def _independent_join(path: Path) -> list[dict[str, Any]]:
    """Every GPU op of the JSON with its launching call's times, joined by args.correlation."""
    events = [e for e in load_json(path)["traceEvents"] if e.get("ph") == "X"]
    launches: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        if str(e.get("cat", "")).lower() in LAUNCH_CATS and "correlation" in e.get("args", {}):
            launches[e["args"]["correlation"]].append(e)
    assert all(len(v) == 1 for v in launches.values()), "a correlation id names two launching calls"
    rows = []
    for e in events:
        if str(e.get("cat", "")).lower() not in GPU_CATS:
            continue
        corr = e.get("args", {}).get("correlation")
        start, end = to_ns(e["ts"]), to_ns(e["ts"]) + to_ns(e["dur"])
        call = launches.get(corr, [None])[0] if corr is not None else None
        row: dict[str, Any] = {
            "corr": corr,
            "start": start,
            "dur": end - start,
            "launch_name": None,
            "api_dur": None,
            "queue": None,
            "wall": None,
            "lead": None,
        }
        if call is not None:
            lstart, lend = to_ns(call["ts"]), to_ns(call["ts"]) + to_ns(call["dur"])
            row.update(
                launch_name=call["name"],
                api_dur=lend - lstart,
                lead=start - lstart,
                queue=start - lend if start - lend >= 0 else None,
                wall=max(lend, end) - lstart,
            )
        rows.append(row)
    return sorted(rows, key=lambda r: (r["corr"] if r["corr"] is not None else -1, r["start"]))


def _ours(path: Path) -> list[dict[str, Any]]:
    rows = K.per_launch(traceconv.read(path), kinds=GPU_KINDS)
    out = []
    for r in rows.astype(object).where(rows.notna(), None).to_dict("records"):
        lead = None if r["api_start_ns"] is None else r["kernel_start_ns"] - r["api_start_ns"]
        out.append(
            {
                "corr": r["correlation_id"],
                "start": r["kernel_start_ns"],
                "dur": r["kernel_dur_ns"],
                "launch_name": r["launch_name"],
                "api_dur": r["api_dur_ns"],
                "queue": r["queue_dur_ns"],
                "wall": r["total_dur_ns"],
                "lead": lead,
            }
        )
    return sorted(out, key=lambda r: (r["corr"] if r["corr"] is not None else -1, r["start"]))


@pytest.mark.parametrize("path", PYTORCH_TRACES, ids=lambda p: p.name[:50])
def test_pytorch_launch_times_equal_an_independent_join(path: Path) -> None:
    truth = _independent_join(path)
    ours = _ours(path)
    assert len(ours) == len(truth) > 0  # nothing dropped, unlaunched rows included
    fields = ("launch_name", "dur", "api_dur", "queue", "wall", "lead")
    mismatches = [(t, o) for t, o in zip(truth, ours, strict=True) if any(t[f] != o[f] for f in fields)]
    assert not mismatches, f"{len(mismatches)} rows differ, first: {mismatches[0]}"
    assert any(t["queue"] is not None for t in truth) and any(t["launch_name"] for t in truth)


def test_cuda_graph_kernels_share_their_graph_launch() -> None:
    rows = K.per_launch(traceconv.read(fixture("pytorch/h200/cuda_graph.json")), kinds=GPU_KINDS)
    graph = rows[rows["launch_name"] == "cudaGraphLaunch"]
    assert len(graph) == 20 and set(graph["kind"]) == {"kernel", "memset"}
    per_call = graph.groupby("api_start_ns").size()
    assert (per_call > 1).all()  # one launch call, several kernels
    # A kernel of a graph may start before the graph launch returns: no queue time then.
    early = graph["kernel_start_ns"] < graph["api_start_ns"] + graph["api_dur_ns"]
    assert early.any() and graph.loc[early, "queue_dur_ns"].isna().all()


def test_unlaunched_rows_are_kept_and_counted() -> None:
    """In the public MI300 (HIP) trace, GPU ops of the first iteration have no runtime call in the trace."""
    path = fixture("pytorch/public/AMD-AGI__TraceLens__tests_traces_mi300_resnet_act_checkpoint.json.gz")
    truth = _independent_join(path)
    unlaunched = sum(1 for t in truth if t["launch_name"] is None)
    table = traceconv.read(path)
    rows = K.per_launch(table, kinds=GPU_KINDS)
    assert unlaunched > 0 and rows["api_start_ns"].isna().sum() == unlaunched
    assert K.launch_totals(rows).no_launch == unlaunched
    by_launch = K.summary(rows, by="launch")
    assert by_launch["no_launch"].sum() == unlaunched == by_launch["count"][by_launch["launch_name"].isna()].sum()
    assert by_launch["count"].sum() == len(rows)
    assert set(by_launch["launch_name"].dropna()) >= {"hipLaunchKernel", "hipMemcpyAsync"}
    # the PyTorch reader counts them in traceconv.stats with a note, as the nsys reader does
    stats = json.loads(table.schema.metadata[b"traceconv.stats"])
    assert stats["counters"]["gpu_rows_without_launch"] == unlaunched
    assert any(n.startswith(f"{unlaunched:,} kernel/memcpy/memset rows have no launching") for n in stats["notes"])


def test_summary_by_name_equals_stdlib_statistics() -> None:
    rows = K.per_launch(traceconv.read(fixture("pytorch/h200/compiled_triton.json")))
    got = K.summary(rows).set_index("name")
    assert got["count"].sum() == len(rows) and abs(got["time_pct"].sum() - 100.0) < 1e-9
    for name, group in rows.groupby("name", observed=True):
        ours = got.loc[name]
        for prefix, col in K.MEASURES.items():
            values = [int(v) for v in group[col].dropna()]
            if not values:
                assert pd.isna(ours[f"{prefix}_avg_ns"]) and pd.isna(ours[f"{prefix}_std_ns"])
                continue
            assert ours[f"{prefix}_total_ns"] == sum(values)
            assert ours[f"{prefix}_med_ns"] == statistics.median(values)
            assert (ours[f"{prefix}_min_ns"], ours[f"{prefix}_max_ns"]) == (min(values), max(values))
            assert ours[f"{prefix}_avg_ns"] == pytest.approx(statistics.fmean(values), abs=1e-6)
            std = statistics.stdev(values) if len(values) > 1 else 0.0
            assert ours[f"{prefix}_std_ns"] == pytest.approx(std, abs=1e-6)
    order = list(got["exec_total_ns"])
    assert order == sorted(order, reverse=True)


# -- Nsight Systems: NVIDIA's own numbers ------------------------------------------------------
def _csv(name: str) -> list[dict[str, str]]:
    with open(fixture(f"nsys/h200/nsys-stats/fixed.{name}.csv"), newline="") as fh:
        return list(csv.DictReader(fh))


def _api_name(name: Any) -> Any:
    """API names without a version suffix: nsys stats strips ``_v7000`` but keeps ``_v11060``; traceconv strips both."""
    return re.sub(r"_v\d+$", "", name) if isinstance(name, str) else name


def _nvidia_round(value: Any) -> str:
    """SQLite's round(x, 1) as nsys stats prints it: half away from zero on the double's exact value."""
    if value is None or pd.isna(value):
        return ""
    return str(Decimal(float(value)).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP))


def _int(text: str) -> int | None:
    return int(text) if text != "" else None


def _per_launch_from_exec_trace() -> pd.DataFrame:
    """NVIDIA's per-kernel rows as a per_launch() frame, to check summary() alone on NVIDIA's input."""
    rows = _csv("cuda_kern_exec_trace")
    cols: dict[str, Any] = {
        "api_start_ns": [int(r["API Start (ns)"]) for r in rows],
        "api_dur_ns": [int(r["API Dur (ns)"]) for r in rows],
        "queue_start_ns": [_int(r["Queue Start (ns)"]) for r in rows],
        "queue_dur_ns": [_int(r["Queue Dur (ns)"]) for r in rows],
        "kernel_start_ns": [int(r["Kernel Start (ns)"]) for r in rows],
        "kernel_dur_ns": [int(r["Kernel Dur (ns)"]) for r in rows],
        "total_dur_ns": [int(r["Total Dur (ns)"]) for r in rows],
        "pid": [int(r["PID"]) for r in rows],
        "tid": [int(r["TID"]) for r in rows],
        "device": [int(r["DevId"]) for r in rows],
        "context": [None] * len(rows),
        "stream": [None] * len(rows),
        "launch_name": [r["API Function"] for r in rows],
        "name": [r["Kernel Name"] for r in rows],
        "kind": ["kernel"] * len(rows),
        "correlation_id": [None] * len(rows),
        "trace_id": ["fixed"] * len(rows),
        "op_name": [None] * len(rows),
    }
    text = ("launch_name", "name", "kind", "trace_id", "op_name")
    return pd.DataFrame({k: pd.Categorical(v) if k in text else pd.Series(v, dtype="Int64") for k, v in cols.items()})


GPU_KERN_SUM = {
    "Time (%)": "time_pct",
    "Total Time (ns)": "exec_total_ns",
    "Instances": "count",
    "Avg (ns)": "exec_avg_ns",
    "Med (ns)": "exec_med_ns",
    "Min (ns)": "exec_min_ns",
    "Max (ns)": "exec_max_ns",
    "StdDev (ns)": "exec_std_ns",
}
EXEC_SUM_STATS = {"T": "wall", "A": "api", "Q": "queue", "K": "exec"}
EXEC_SUM_SUFFIX = {"Avg": "avg", "Med": "med", "Min": "min", "Max": "max", "StdDev": "std"}


def _as_printed(value: Any, header: str) -> str:
    """One of our values as nsys stats prints that column: integers plain, the rest round(x, 1)."""
    if value is None or pd.isna(value):
        return ""
    if header.startswith(("Total", "Instances", "Min", "Max", "Count", "QCount")) or header[1:4] in ("Min", "Max"):
        return str(int(value))
    return _nvidia_round(value)


def _check_gpu_kern_sum(got: pd.DataFrame) -> None:
    want = _csv("cuda_gpu_kern_sum")
    assert list(got["name"]) == [r["Name"] for r in want]  # same kernels, in NVIDIA's order
    for row, (_, ours) in zip(want, got.iterrows(), strict=True):
        for header, col in GPU_KERN_SUM.items():
            assert _as_printed(ours[col], header) == row[header], (row["Name"][:60], header)


def _check_exec_sum(got: pd.DataFrame) -> None:
    want = _csv("cuda_kern_exec_sum")
    keyed = {
        (int(r["PID"]), int(r["TID"]), int(r["DevId"]), _api_name(r["API Name"]), r["Kernel Name"]): r for r in want
    }
    assert len(keyed) == len(want) == len(got)
    for _, ours in got.iterrows():
        row = keyed[(ours["pid"], ours["tid"], ours["device"], _api_name(ours["launch_name"]), ours["name"])]
        assert (ours["count"], ours["queued"], ours["no_launch"]) == (int(row["Count"]), int(row["QCount"]), 0)
        for letter, prefix in EXEC_SUM_STATS.items():
            for suffix, stat in EXEC_SUM_SUFFIX.items():
                header = f"{letter}{suffix} (ns)"
                printed = _as_printed(ours[f"{prefix}_{stat}_ns"], header)
                if header == "QStdDev (ns)" and row["QCount"] == "0":
                    assert printed == "" and row[header] == "0.0"  # NVIDIA prints 0.0 for no values: we say null
                    continue
                assert printed == row[header], (row["Kernel Name"][:60], header)


def test_summary_math_equals_nsys_stats_on_nvidias_own_rows() -> None:
    """summary() alone, fed NVIDIA's per-kernel rows: the per-name and per-launch tables are NVIDIA's."""
    rows = _per_launch_from_exec_trace()
    _check_gpu_kern_sum(K.summary(rows, by="name"))
    _check_exec_sum(K.summary(rows, by="exec"))


# -- the command ------------------------------------------------------------------------------
STREAMS = fixture("pytorch/h200/streams_memcpy.json")
# A real trace whose one kernel has no launching call (HTA's large_integer test file).
UNLAUNCHED = fixture(
    "pytorch/public/facebookresearch__HolisticTraceAnalysis__tests_data_large_integer_trace_"
    "rank-70.Mar_25_20_48_12.2861.pt.trace.json.gz"
)


def _run(*args: str) -> Any:
    return CliRunner().invoke(main, ["kernels", *args], env={"COLUMNS": "160"})


def test_cli_csv_is_the_summary_with_exact_integers() -> None:
    result = _run(str(STREAMS), "--format", "csv")
    assert result.exit_code == 0, result.output
    got = list(csv.DictReader(io.StringIO(result.stdout)))
    want = K.summary(traceconv.read(STREAMS))
    assert [r["name"] for r in got] == list(want["name"])
    assert [int(r["exec_total_ns"]) for r in got] == list(want["exec_total_ns"])
    assert [int(r["api_max_ns"]) for r in got] == list(want["api_max_ns"])
    assert [r["queue_min_ns"] for r in got] == ["" if pd.isna(v) else str(v) for v in want["queue_min_ns"]]


def test_cli_table_is_aligned_with_units_and_a_footer() -> None:
    result = _run(str(STREAMS), "--top", "2")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("Time (%)  Total (ms)  Count   Avg (µs)") and "Name" in lines[0]
    assert set(lines[1]) == {"-", " "} and len(lines) == 2 + 2 + 1 + 3
    assert all(len(line) <= 160 for line in lines[:4]) and lines[2].endswith("…")
    assert lines[2].split()[:3] == ["90.4", "10.710", "4"]  # 10,709,955 ns of 11,848,481
    assert lines[2].split()[-3:-1] == ["cuda", "51.3"]  # the fp32 GEMM: CUDA cores, its TFLOP/s (the roofline)
    assert lines[4] == "Not shown at 160 columns: StdDev (µs), % roof (--format json has them)."
    assert lines[5] == "16 kernel rows, 11.848 ms of execution, 4 names"
    assert lines[6] == "Showing the 2 longest of 4 names; --top 0 shows all in that order."


def test_cli_per_launch_csv_has_every_kernel_in_launch_order() -> None:
    result = _run(
        str(fixture("pytorch/h200/cuda_graph.json")),
        "--per-launch",
        "--format",
        "csv",
        "--kind",
        "kernel",
        "--kind",
        "memset",
    )
    assert result.exit_code == 0, result.output
    got = list(csv.DictReader(io.StringIO(result.stdout)))
    assert len(got) == 28 and list(got[0]) == list(K.PER_LAUNCH)
    starts = [int(r["api_start_ns"]) for r in got]
    assert starts == sorted(starts)
    assert {r["kind"] for r in got} == {"kernel", "memset"}


def test_cli_csv_keeps_epoch_nanoseconds_exact_next_to_empty_cells() -> None:
    """Nullable epoch times (~1.8e18 ns) must not pass through float64 on their way to CSV."""
    result = _run(str(STREAMS), "--per-launch", "--format", "csv", "--top", "0")
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    queued = [r for r in rows if r["queue_start_ns"]]
    assert queued and any(not r["queue_start_ns"] for r in rows)
    for r in queued:
        assert int(r["queue_start_ns"]) == int(r["api_start_ns"]) + int(r["api_dur_ns"])
        assert int(r["kernel_start_ns"]) == int(r["queue_start_ns"]) + int(r["queue_dur_ns"])


def test_cli_per_launch_top_is_the_longest_kernels() -> None:
    result = _run(str(STREAMS), "--per-launch", "--top", "3", "--format", "json")
    doc = json.loads(result.stdout)
    durations = [r["kernel_dur_ns"] for r in doc["rows"]]
    kernels = [to_ns(e["dur"]) for e in load_json(STREAMS)["traceEvents"] if e.get("cat") == "kernel"]
    assert durations == sorted(kernels, reverse=True)[:3] and doc["totals"]["rows"] == len(kernels) == 16


def test_cli_counts_kernels_with_no_launching_call() -> None:
    table = _run(str(UNLAUNCHED), "--per-launch")
    assert table.exit_code == 0, table.output
    assert "1 row has no launching call in the trace" in table.stdout
    assert "(none in trace)" in table.stdout
    doc = json.loads(_run(str(UNLAUNCHED), "--format", "json").stdout)
    assert doc["totals"]["no_launch"] == 1 and doc["rows"][0]["no_launch"] == 1
    assert doc["rows"][0]["api_avg_ns"] is None and doc["rows"][0]["exec_total_ns"] == 50000
    csv_run = _run(str(UNLAUNCHED), "--format", "csv")
    assert "1 of 1 kernel rows has no launching call" in csv_run.stderr


def test_cli_reads_traceconv_parquet_like_the_trace(tmp_path: Path) -> None:
    out = tmp_path / "streams.parquet"
    traceconv.convert(STREAMS, out)
    assert out.read_bytes()[:4] == b"PAR1"
    assert _run(str(out), "--format", "csv").stdout == _run(str(STREAMS), "--format", "csv").stdout
    loaded = load(out, columns=K.INPUT_COLUMNS, kinds=K.input_kinds())
    assert set(loaded["kind"].to_pylist()) == {"kernel", "cuda_api"}


@pytest.mark.parametrize(
    ("make", "code", "message"),
    [
        (lambda d: d / "missing.json", 3, "missing.json: does not exist; check the path"),
        (lambda d: _write(d / "notes.txt", b"hello"), 4, "notes.txt: is neither a PyTorch profiler trace"),
        (lambda d: _other_parquet(d / "other.parquet"), 4, "other.parquet: is not a traceconv Parquet file"),
    ],
)
def test_cli_errors_are_one_line(tmp_path: Path, make: Any, code: int, message: str) -> None:
    result = _run(str(make(tmp_path)))
    assert result.exit_code == code
    assert result.stderr.count("\n") == 1 and message in result.stderr and "Traceback" not in result.output


def test_cli_trace_without_gpu_work_says_so(tmp_path: Path) -> None:
    """Hand-made: a CPU-only profile, one operator and no kernel rows (an empty trace is an error)."""
    op = b'{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1, "dur": 2}'
    cpu_only = _write(tmp_path / "cpu_only.json", b'{"traceEvents": [' + op + b"]}")
    result = _run(str(cpu_only))
    assert result.exit_code == 0 and "no kernel rows" in result.stdout
    assert json.loads(_run(str(cpu_only), "--format", "json").stdout)["rows"] == []
    empty = _run(str(_write(tmp_path / "empty.json", b'{"traceEvents": []}')))
    assert empty.exit_code == 3 and "holds no events" in empty.output


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _other_parquet(path: Path) -> Path:
    pq.write_table(pd.DataFrame({"a": [1]}).pipe(lambda d: __import__("pyarrow").Table.from_pandas(d)), path)
    return path


# -- Nsight Systems end to end: traceconv's reader + per_launch/summary vs NVIDIA ---------------
def _nsys_per_launch() -> pd.DataFrame:
    return K.per_launch(traceconv.read(FIXED_SQLITE))


def test_nsys_every_kernel_equals_cuda_kern_exec_trace_row_for_row() -> None:
    want = sorted(_csv("cuda_kern_exec_trace"), key=lambda r: (int(r["API Start (ns)"]), int(r["Kernel Start (ns)"])))
    ours = _nsys_per_launch()
    assert len(ours) == len(want) == 1987
    # nsys stats prints times from the session start; traceconv gives Unix epoch nanoseconds.
    offset = int(ours["api_start_ns"][0]) - int(want[0]["API Start (ns)"])
    shifted = {
        "API Start (ns)": "api_start_ns",
        "Queue Start (ns)": "queue_start_ns",
        "Kernel Start (ns)": "kernel_start_ns",
    }
    plain = {
        "API Dur (ns)": "api_dur_ns",
        "Queue Dur (ns)": "queue_dur_ns",
        "Kernel Dur (ns)": "kernel_dur_ns",
        "Total Dur (ns)": "total_dur_ns",
        "PID": "pid",
        "TID": "tid",
        "DevId": "device",
    }
    records = ours.astype(object).where(ours.notna(), None).to_dict("records")
    for row, mine in zip(want, records, strict=True):
        for header, col in shifted.items():
            assert _int(row[header]) == (None if mine[col] is None else mine[col] - offset), (header, row)
        for header, col in plain.items():
            assert _int(row[header]) == mine[col], (header, row)
        assert (_api_name(row["API Function"]), row["Kernel Name"]) == (_api_name(mine["launch_name"]), mine["name"])


def test_nsys_per_name_table_equals_cuda_gpu_kern_sum() -> None:
    _check_gpu_kern_sum(K.summary(traceconv.read(FIXED_SQLITE), by="name"))


def test_nsys_launch_summary_equals_cuda_kern_exec_sum() -> None:
    _check_exec_sum(K.summary(_nsys_per_launch(), by="exec"))


NVIDIA_JOIN = """
SELECT r.end - r.start, iif(k.start - r.end >= 0, k.start - r.end, NULL), k.end - k.start,
       max(r.end, k.end) - r.start, (r.globalTid >> 24) & 0x00FFFFFF, r.globalTid & 0x00FFFFFF, k.deviceId, s.value
FROM CUPTI_ACTIVITY_KIND_KERNEL AS k
JOIN CUPTI_ACTIVITY_KIND_RUNTIME AS r ON k.correlationId == r.correlationId {same_process}
LEFT JOIN StringIds AS s ON s.id == k.demangledName
"""


def _nvidia_join(path: Path) -> tuple[int, list[tuple[Any, ...]]]:
    """cuda_kern_exec_trace's own query (nsys stats), run with sqlite3 on the export: kernels, joined rows."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables:
            return 0, []
        kernels = db.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
        if "CUPTI_ACTIVITY_KIND_RUNTIME" not in tables:
            return kernels, []
        columns = {r[1] for r in db.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")}
        # Exports trimmed by hand (nsys-ai's healthy_1pct) have no globalPid: one process then.
        same = "AND k.globalPid == (r.globalTid & 0xFFFFFFFFFF000000)" if "globalPid" in columns else ""
        return kernels, db.execute(NVIDIA_JOIN.format(same_process=same)).fetchall()
    finally:
        db.close()


def _key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((v is not None, v) for v in row)


# nsys-ai's hand-trimmed healthy_1pct holds an API call at -3000..-500 ns (before the session start).
NSYS_EXPORTS = real_files("nsys", ("*.sqlite",))


@pytest.mark.parametrize(
    "path", NSYS_EXPORTS, ids=lambda p: f"{p.parent.name}/{p.name[:40]}" if isinstance(p, Path) else None
)
def test_nsys_four_durations_equal_nvidias_join_on_every_export(path: Path) -> None:
    kernels, truth = _nvidia_join(path)
    rows = K.per_launch(traceconv.read(path))
    assert len(rows) == kernels  # nothing dropped
    launched = rows[rows["api_start_ns"].notna()]
    assert len(launched) == len(truth) and K.launch_totals(rows).no_launch == kernels - len(truth)
    cols = ["api_dur_ns", "queue_dur_ns", "kernel_dur_ns", "total_dur_ns", "pid", "tid", "device", "name"]
    ours = [tuple(r) for r in launched[cols].astype(object).where(launched[cols].notna(), None).itertuples(index=False)]
    assert sorted(ours, key=_key) == sorted(truth, key=_key)


def test_nsys_cli_by_launch_names_the_runtime_and_driver_calls() -> None:
    result = _run(str(FIXED_SQLITE), "--by", "launch", "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    counts = {r["launch_name"]: r["count"] for r in doc["rows"]}
    want: dict[str, int] = defaultdict(int)
    for r in _csv("cuda_kern_exec_trace"):
        want[_api_name(r["API Function"])] += 1
    assert {_api_name(k): v for k, v in counts.items()} == want
    assert doc["totals"] == {**doc["totals"], "rows": 1987, "no_launch": 0}


# -- invariants ---------------------------------------------------------------------------------
@pytest.mark.parametrize("path", [*PYTORCH_TRACES[:3], FIXED_SQLITE], ids=lambda p: p.name[:40])
def test_wall_time_is_api_plus_queue_plus_execution_when_queued(path: Path) -> None:
    rows = K.per_launch(traceconv.read(path), kinds=GPU_KINDS)
    queued = rows[rows["queue_dur_ns"].notna()]
    assert len(queued) > 0
    assert (queued["total_dur_ns"] == queued["api_dur_ns"] + queued["queue_dur_ns"] + queued["kernel_dur_ns"]).all()
    launched = rows[rows["api_start_ns"].notna()]
    assert (launched["total_dur_ns"] >= launched["api_dur_ns"]).all()
    assert (launched["total_dur_ns"] >= launched["kernel_dur_ns"]).all()


@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 10**12)), min_size=1, max_size=60))
@settings(max_examples=60, deadline=None)
def test_per_group_statistics_follow_nvidias_definitions(pairs: list[tuple[str, int]]) -> None:
    """Hand-made groups: median = midpoint of the middle two, stddev = sample (n-1), 0 for one value."""
    rows = pd.DataFrame({c: pd.array([None] * len(pairs), "Int64") for c in K.PER_LAUNCH})
    rows["name"] = pd.Categorical([p[0] for p in pairs])
    rows["kernel_dur_ns"] = pd.array([p[1] for p in pairs], "Int64")
    got = K.summary(rows, by="name").set_index("name")
    groups: dict[str, list[int]] = defaultdict(list)
    for name, value in pairs:
        groups[name].append(value)
    assert sorted(got.index) == sorted(groups)
    for name, ints in groups.items():
        row = got.loc[name]
        assert (row["count"], row["exec_total_ns"]) == (len(ints), sum(ints))
        assert (row["exec_min_ns"], row["exec_max_ns"]) == (min(ints), max(ints))
        assert row["exec_med_ns"] == statistics.median(ints)
        assert row["exec_std_ns"] == pytest.approx(statistics.stdev(ints) if len(ints) > 1 else 0.0, rel=1e-9, abs=1e-3)
        assert row["no_launch"] == len(ints)
