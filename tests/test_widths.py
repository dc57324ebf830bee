"""Every terminal table fits the terminal: at 80 and 100 columns (COLUMNS) no line of kernels,
summary, diff, ranks, ops or sql is wider; the columns a table leaves out are named under it; and
names cut to fit stay apart where they differ (at 100 columns kernels was 141 wide, its names cut
to 24 characters, five rows reading ``sm80_xmma_gemm_f32f32_f…``; ops 255, ranks 117).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import traceconv
from traceconv.cli import main
from traceconv.names import fit, kernel_label

from .conftest import fixture

BUGGY = fixture("pytorch/h200/train_buggy.pt.trace.json.gz")
FIXED = fixture("pytorch/h200/train_fixed.pt.trace.json.gz")
NSYS = fixture("nsys/h200/buggy.sqlite")
NSYS_FIXED = fixture("nsys/h200/fixed.sqlite")
AUTOGRAD = fixture("nsys/h200/autograd_nvtx.sqlite")
STACKS = fixture("key_averages/h200/ka_stack_verbose.json")
METRICS = fixture("nsys/h200-metrics/sm_after.sqlite")
# bf16 training: tensor-core kernels with the roofline's columns (Cores, TFLOP/s, % roof), both profilers
BF16 = fixture("planted/h200/pytorch/train_bf16.json", packed=True)
BF16_NSYS = fixture("planted/h200/nsys/train_bf16.sqlite", packed=True)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """train_buggy as Parquet (read once by the commands below), and the two DDP ranks in a folder."""
    root = tmp_path_factory.mktemp("widths")
    ranks = root / "ddp"
    ranks.mkdir()
    for rank in (0, 1):
        shutil.copy(fixture(f"pytorch/h200/ddp_rank{rank}.pt.trace.json"), ranks)
    return {"buggy": traceconv.convert(BUGGY, root / "buggy.parquet").path, "ranks": ranks}


COMMANDS: list[Any] = [
    pytest.param(["kernels", "{buggy}"], id="kernels"),
    pytest.param(["kernels", NSYS, "--top", "0"], id="kernels-nsys"),
    pytest.param(["kernels", "{buggy}", "--per-launch"], id="kernels-per-launch"),
    pytest.param(["kernels", NSYS, "--by", "op"], id="kernels-by-op"),
    pytest.param(["kernels", METRICS], id="kernels-sm-active"),
    pytest.param(["kernels", BF16, "--top", "0"], id="kernels-roofline"),
    pytest.param(["kernels", BF16_NSYS], id="kernels-roofline-nsys"),
    pytest.param(["summary", "{buggy}"], id="summary"),
    pytest.param(["summary", METRICS], id="summary-metrics"),
    pytest.param(["diff", NSYS, NSYS_FIXED], id="diff"),
    pytest.param(["ranks", "{ranks}"], id="ranks"),
    pytest.param(["ops", "{buggy}"], id="ops"),
    pytest.param(["ops", "{buggy}", "--like", "torch", "--top", "0"], id="ops-torch"),
    pytest.param(["ops", "{buggy}", "--group-by-shape"], id="ops-shapes"),
    pytest.param(["ops", STACKS, "--group-by-stack", "5"], id="ops-stacks"),
    pytest.param(["ops", AUTOGRAD], id="ops-nsys"),
    pytest.param(["ops", BF16], id="ops-roofline"),
    pytest.param(["summary", BF16_NSYS], id="summary-roofline-nsys"),
    pytest.param(["sql", "SELECT * FROM events", "{buggy}"], id="sql"),
]


def run(args: list[Any], inputs: dict[str, Path], width: int | None) -> str:
    argv = [str(a).format(**inputs) for a in args]
    result = CliRunner().invoke(main, argv, env={"COLUMNS": str(width) if width else None})
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize("width", [80, 100])
@pytest.mark.parametrize("args", COMMANDS)
def test_every_table_fits_the_terminal(args: list[Any], width: int, inputs: dict[str, Path]) -> None:
    lines = run(args, inputs, width).splitlines()
    assert lines and max(len(line) for line in lines) <= width, max(lines, key=len)


@pytest.mark.parametrize("width", [80, 100])
def test_the_columns_left_out_are_named(width: int, inputs: dict[str, Path]) -> None:
    text = run(["kernels", "{buggy}"], inputs, width)
    said = " ".join(text[text.index("Not shown at") :].split())
    assert said.startswith(f"Not shown at {width} columns: ") and "StdDev (µs)" in said
    header = text.splitlines()[0]
    assert header.startswith("Time (%)  Total (ms)  Count  Avg (µs)") and "StdDev" not in header


def _column(text: str, header: str, rows: int) -> list[str]:
    """The cells of the last column (left-aligned, headed ``header``) of the table ``text`` starts with."""
    lines = text.splitlines()
    at = lines[0].index(header)
    return [line[at:].rstrip() for line in lines[2 : 2 + rows]]


@pytest.mark.parametrize("width", [80, 100])
@pytest.mark.parametrize(
    ("trace", "flags", "header"),
    [(BUGGY, [], "Name"), (NSYS, [], "Name"), (BUGGY, ["--per-launch"], "Kernel Name")],
    ids=["train_buggy", "nsys", "per-launch"],
)
def test_kernel_names_cut_to_fit_stay_apart(
    trace: Path, flags: list[str], header: str, width: int, inputs: dict[str, Path]
) -> None:
    """Two rows show the same name exactly when their kernels have the same name."""
    rows = json.loads(run(["kernels", trace, *flags, "--top", "0", "--format", "json"], inputs, width))["rows"]
    names = [kernel_label(r["name"]) for r in rows]
    shown = _column(run(["kernels", trace, *flags, "--top", "0"], inputs, width), header, len(rows))
    assert any(s.endswith("…") for s in shown)
    assert len(set(zip(names, shown, strict=True))) == len(set(names)) == len(set(shown))


GEMM = "sm80_xmma_gemm_f32f32_f32f32_f32_{}_n_tilesize{}_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel"
CUB = (
    "at_cuda_detail::cub::detail::radix_sort::DeviceRadixSort{}Kernel<at_cuda_detail::cub::detail::radix::"
    "policy_hub<long, cub::detail::OpaqueType<{}>, unsigned long long>::Policy1000, unsigned long long>"
)


def test_names_that_share_a_long_start_show_where_they_differ() -> None:
    """The cuBLAS kernels that read ``sm80_xmma_gemm_f32f32_f…`` in five rows, and CUB kernels (of the
    nsys exports) that differ in two places."""
    shapes = (("tn", "128x128x8"), ("nn", "128x128x8"), ("nt", "128x128x8"), ("tn", "128x64x8"), ("nn", "256x128x8"))
    names = [GEMM.format(*p) for p in shapes]
    names += [CUB.format(k, t) for k in ("ExclusiveSum", "Histogram") for t in ("(int)8", "8")]
    for width in range(12, 61):
        out = fit(names, width)
        assert len(set(out)) == len(names) and all(len(o) <= width for o in out), (width, out)
    assert fit(names[:3], 24) == ["sm80_xm…tn_n_tilesize12…", "sm80_xm…nn_n_tilesize12…", "sm80_xm…nt_n_tilesize12…"]


def test_without_a_terminal_ops_prints_torch_s_table_whole(inputs: dict[str, Path]) -> None:
    """No COLUMNS and not a terminal (a file, a pipe): torch's layout, 12 characters a column."""
    lines = run(["ops", "{buggy}", "--like", "torch"], inputs, None).splitlines()
    assert (
        len(lines[0]) > 200 and "Self CPU Mem" in lines[1] and not any(line.startswith("Not shown") for line in lines)
    )
