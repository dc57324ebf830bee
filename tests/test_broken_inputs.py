"""Broken inputs made from real traces, through the real command line.

The corpus is made at test time by ``tests/broken/make_broken.py`` (never committed); its
manifest says what each file must give: the exit code, one line on stderr naming the file
with the words a user needs, nothing left at the output path (and an existing output
untouched) on failure, and with ``--salvage`` exactly the complete events. Hostile inputs
(gzip bomb, a 600 MB string) are made lazily here, streamed to disk.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import traceconv

from .broken import make_broken as MB
from .conftest import ROOT, fixture
from .kineto_truth import load, to_ns

TIMEOUT = 60  # seconds per command: a hang fails the case instead of the whole run
MAX_RSS = 1 << 30  # bytes: hostile inputs must be refused in bounded memory
KNOWN = b"an existing output file that a failed run must leave alone\n"

# Cases the implementation does not meet yet (strict xfail, so that they fail once fixed): none today.
PENDING: dict[str, str] = {}
PENDING_SALVAGE: dict[str, str] = {}


def _collect() -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The manifest and file hashes, made once at collection (the session makes them again, and compares)."""
    with tempfile.TemporaryDirectory(prefix="traceconv-broken-") as tmp:
        MB.generate(Path(tmp))
        return _manifest(Path(tmp)), _hashes(Path(tmp))


def _manifest(folder: Path) -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = json.loads((folder / "manifest.json").read_text())["cases"]
    return cases


def _hashes(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != "manifest.json"
    }


CASES, HASHES = _collect()


def _id(case: dict[str, Any]) -> str:
    return case["file"] + ("" if case["command"] == "ingest" else f"[{case['command']}]")


def _first_failures(cases: list[dict[str, Any]]) -> set[str]:
    """One failing case per group and command: these run again over an existing output file."""
    seen: set[tuple[str, str]] = set()
    ids = set()
    for c in cases:
        key = (c["group"], c["command"])
        if 0 not in c["exit"] and key not in seen:
            seen.add(key)
            ids.add(_id(c))
    return ids


OVER_EXISTING = _first_failures(CASES)


# The damages the generator makes to several traces, each named STEM.DAMAGE (make_broken.py).
PER_TRACE = ("truncated", "gzip_cut", "damaged")


def _repeats(cases: list[dict[str, Any]]) -> set[str]:
    """The cases that repeat a damage already made to another trace (``cuda_graph.trunc_r0`` after
    ``streams_memcpy.trunc_r0``): a sweep over the real traces, which ``make test`` runs on the first."""
    seen: set[tuple[str, str, str]] = set()
    ids = set()
    for c in cases:
        key = (c["group"], c["command"], c["file"].split(".", 1)[-1])
        if c["group"] in PER_TRACE and key in seen:
            ids.add(_id(c))
        seen.add(key)
    return ids


REPEATS = _repeats(CASES)


def _params(cases: list[dict[str, Any]], pending: dict[str, str]) -> list[Any]:
    marks = {k: pytest.mark.xfail(strict=True, reason=f"lead: not implemented yet ({v})") for k, v in pending.items()}
    return [
        pytest.param(
            c,
            id=_id(c),
            marks=([marks[_id(c)]] if _id(c) in marks else []) + ([pytest.mark.sweep] if _id(c) in REPEATS else []),
        )
        for c in cases
    ]


@pytest.fixture(scope="session")
def broken(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The corpus, made by the generator's own command line."""
    out = tmp_path_factory.mktemp("broken")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "broken" / "make_broken.py"), str(out)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr
    return out


# -- running the command line -----------------------------------------------------------------
@dataclass
class Run:
    rc: int
    stdout: str
    stderr: str
    max_rss: int | None = None  # bytes, when measured


_MEASURE = (
    "import resource, subprocess, sys; p = subprocess.run(sys.argv[1:]); "
    "sys.stderr.write('\\nMAXRSS %d\\n' % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
    "sys.exit(p.returncode)"
)


def traceconv_cli(*args: str | Path, cwd: Path, measure: bool = False, env: dict[str, str] | None = None) -> Run:
    """``python -m traceconv.cli ARGS`` in a subprocess; with ``measure``, its peak RSS (alone in a wrapper)."""
    cmd = [sys.executable, "-m", "traceconv.cli", *map(str, args)]
    if measure:
        cmd = [sys.executable, "-c", _MEASURE, *cmd]
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, errors="replace", timeout=TIMEOUT, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"traceconv {' '.join(map(str, args))} still running after {TIMEOUT} s: a hang")
    stderr, rss = proc.stderr, None
    if measure:
        stderr, _, tail = stderr.rpartition("\nMAXRSS ")
        rss = int(tail) * 1024  # Linux: kilobytes
    return Run(proc.returncode, proc.stdout, stderr, rss)


def one_line(run: Run, name: str) -> str:
    """The single line on stderr, which names the input."""
    assert "Traceback" not in run.stderr, run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{run.stderr}"
    assert name in lines[0], f"the line does not name {name}: {lines[0]}"
    return lines[0]


def listing(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()} if folder.exists() else {}


def check_words(line: str, case: dict[str, Any]) -> None:
    low = line.lower()
    for word in case["error"]:
        assert word.lower() in low, f"{word!r} missing from: {line}"
    if case["error_any"]:
        assert any(w.lower() in low for w in case["error_any"]), f"none of {case['error_any']} in: {line}"


def events_of(out: Path) -> list[tuple[str | None, int | None]]:
    """(name, start relative to the trace's base in ns) of every row of a traceconv Parquet file."""
    table = traceconv.read_table(out)
    base = int(traceconv.trace_metadata(out)["trace"].get("baseTimeNanoseconds") or 0)
    return [
        (n, None if s is None else s - base)
        for n, s in zip(table["name"].to_pylist(), table["start_ns"].to_pylist(), strict=True)
    ]


def source_events(source: str) -> list[tuple[str | None, int | None]]:
    doc = load(ROOT / source)
    return [(e.get("name"), to_ns(e.get("ts"))) for e in doc["traceEvents"]]


# -- the corpus ---------------------------------------------------------------------------------
def test_generator_is_deterministic(broken: Path) -> None:
    assert _manifest(broken) == CASES
    assert _hashes(broken) == HASHES


def test_corpus_covers_every_kind_of_damage() -> None:
    groups = {c["group"] for c in CASES}
    assert groups >= {"truncated", "gzip_cut", "gzip_damaged", "damaged", "dialect", "not_a_trace", "sqlite", "hostile"}
    assert all(c["salvage"]["events"] > 0 for c in CASES if c["salvage"])


@pytest.mark.parametrize("case", _params(CASES, PENDING))
def test_without_salvage(case: dict[str, Any], broken: Path, tmp_path: Path) -> None:
    src = broken / case["file"]
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "result.parquet"
    run = traceconv_cli(case["command"], src, "-o", out, cwd=tmp_path)
    assert run.rc in case["exit"], f"exit {run.rc}, expected {case['exit']}: {run.stderr}{run.stdout}"
    if run.rc == 0:
        check_converted(case, run, out, tmp_path)
        return
    check_words(one_line(run, src.name), case)
    assert listing(out_dir) == {}, "a failed run left files at the output path"
    if _id(case) not in OVER_EXISTING:
        return
    traceconv.convert(MB.STREAMS, out)  # an earlier conversion's output: the failed run must keep it
    earlier = out.read_bytes()
    again = traceconv_cli(case["command"], src, "-o", out, cwd=tmp_path)
    assert again.rc == run.rc
    one_line(again, src.name)
    assert listing(out_dir) == {out.name: earlier}, "a failed run touched the existing output"


def check_converted(case: dict[str, Any], run: Run, out: Path, tmp_path: Path) -> None:
    assert "Traceback" not in run.stderr and run.stderr.strip() == "", run.stderr
    assert listing(out.parent).keys() == {out.name}, "temporary files left beside the output"
    table = traceconv.read_table(out)
    if case["events"] is not None:
        assert table.num_rows == case["events"]
    names = table["name"].to_pylist()
    for check in case["names"]:
        got = names[check["index"]]
        if "equals" in check:
            assert got == check["equals"]
        else:
            assert got.startswith(check["prefix"]) and got.endswith(check["suffix"]), got
    for note in case["notes"]:
        check_note(run.stdout, note)
    if case["kinds_absent"]:
        kinds = set(table["kind"].to_pylist())
        assert kinds and not kinds & set(case["kinds_absent"]), kinds
    if case["rows_removed"] is not None:
        whole = tmp_path / "whole.parquet"
        assert traceconv_cli("nsys", ROOT / case["source"], "-o", whole, cwd=tmp_path).rc == 0
        assert traceconv.read_table(whole).num_rows - table.num_rows == case["rows_removed"]
    for check in case["args_valid"]:
        args = json.loads(table["args"][check["index"]].as_py())
        assert check["key"] in args, args
    if case["arg_key"] is not None:
        args = table["args"][case["arg_key"]["index"]].as_py()
        assert f'"{case["arg_key"]["key"]}"' in args


def check_note(stdout: str, note: dict[str, Any]) -> None:
    """A ``note:`` line names the repair (one of ``any``) and how many were made (one of ``counts``)."""
    lines = [ln for ln in stdout.splitlines() if "note:" in ln and any(w in ln.lower() for w in note["any"])]
    assert lines, f"no note naming {note['any']} in:\n{stdout}"
    counts = [re.compile(rf"(?<![\d,]){n:,}(?![\d,])") for n in note["counts"]]
    assert any(c.search(ln) for ln in lines for c in counts), f"no count {note['counts']} in {lines}"


SALVAGEABLE = [c for c in CASES if c["salvage"]]


@pytest.mark.parametrize("case", _params(SALVAGEABLE, PENDING_SALVAGE))
def test_with_salvage(case: dict[str, Any], broken: Path, tmp_path: Path) -> None:
    src = broken / case["file"]
    out = tmp_path / "out" / "result.parquet"
    run = traceconv_cli("ingest", "--salvage", src, "-o", out, cwd=tmp_path)
    assert run.rc == case["salvage"]["exit"], f"exit {run.rc}: {run.stderr}"
    line = one_line(run, src.name)
    assert "skipped" in line, line
    assert listing(out.parent).keys() == {out.name}
    got = events_of(out)
    expected = source_events(case["source"])
    keep = case["salvage"]["keep"]
    if "prefix" in keep:
        expected = expected[: keep["prefix"]]
    else:
        expected = [e for i, e in enumerate(expected) if i not in set(keep["drop"])]
    assert len(got) == case["salvage"]["events"] == len(expected)
    assert got == expected


# -- hostile inputs, made lazily ---------------------------------------------------------------
def gzip_bomb(path: Path, head: bytes, fill: bytes, size: int) -> None:
    """A valid gzip file of ``head`` then ``size`` bytes of ``fill``, written without compressing them all.

    A block compressed after a full flush does not refer back, so one compressed 1 MiB
    block of ``fill`` is repeated, and the trailer's CRC is computed block by block.
    """
    block = fill * ((1 << 20) // len(fill))
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = comp.compress(head) + comp.flush(zlib.Z_FULL_FLUSH)
    rep = comp.compress(block) + comp.flush(zlib.Z_FULL_FLUSH)
    assert comp.compress(block) + comp.flush(zlib.Z_FULL_FLUSH) == rep
    end = comp.flush(zlib.Z_FINISH)
    n = size // len(block)
    crc = zlib.crc32(head)
    with open(path, "wb") as fh:
        fh.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" + first)
        for _ in range(n):
            fh.write(rep)
            crc = zlib.crc32(block, crc)
        fh.write(end + crc.to_bytes(4, "little") + ((len(head) + n * len(block)) & 0xFFFFFFFF).to_bytes(4, "little"))


def test_gzip_bomb_helper_is_a_valid_gzip(tmp_path: Path) -> None:
    import gzip

    path = tmp_path / "small.json.gz"
    gzip_bomb(path, b'{"traceEvents": [', b"{", 3 << 20)
    assert gzip.decompress(path.read_bytes()) == b'{"traceEvents": [' + b"{" * (3 << 20)


def check_refused(run: Run, name: str, exits: tuple[int, ...]) -> str:
    assert run.rc in exits, f"exit {run.rc}: {run.stderr}"
    line = one_line(run, name)
    assert run.max_rss is not None and run.max_rss < MAX_RSS, f"peak RSS {run.max_rss / 2**20:,.0f} MiB"
    return line


@pytest.mark.slow
@pytest.mark.parametrize("fill", [b"{", b" ", b"\x00"], ids=["braces", "spaces", "zeros"])
def test_gzip_bomb_is_refused_in_bounded_memory(fill: bytes, tmp_path: Path) -> None:
    src = tmp_path / "bomb.json.gz"
    head = b"" if fill == b"\x00" else b'{"traceEvents": ['
    gzip_bomb(src, head, fill, 2 << 30)
    assert src.stat().st_size < 8 << 20
    out = tmp_path / "out" / "bomb.parquet"
    run = traceconv_cli("ingest", src, "-o", out, cwd=tmp_path, measure=True)
    check_refused(run, src.name, (3, 4))
    assert not out.parent.exists() or listing(out.parent) == {}


def write_huge_string(path: Path, size: int) -> None:
    """A real trace with one event's name ``size`` bytes long, streamed to disk."""
    t = MB.load_trace(MB.STREAMS)
    s, e = t.spans[len(t.spans) // 2]
    m = MB.NAME_VALUE.search(t.data, s, e)
    assert m is not None
    with open(path, "wb") as fh:
        fh.write(t.data[: m.start(1)])
        chunk = b"a" * (1 << 20)
        for _ in range(size // len(chunk)):
            fh.write(chunk)
        fh.write(t.data[m.end(1) :])


def test_a_large_event_is_scanned_a_few_times_not_once_per_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While one event is larger than the buffer, the buffer doubles: a 48 MiB event is looked
    for a cut in about log2(48) rounds, not in 24 rounds of two 1 MiB chunks more each (which made
    a 256 MiB event take 24 s to refuse and n^2 work on every large event)."""
    from traceconv.readers.pytorch import chunker

    src = tmp_path / "large_name.json"
    write_huge_string(src, 48 << 20)
    rounds = []
    cut = chunker.EventChunks._cut

    def counted(self: Any, buf: bytearray, eof: bool) -> Any:
        if len(buf) > 4 << 20:
            rounds.append(len(buf))
        return cut(self, buf, eof)

    monkeypatch.setattr(chunker.EventChunks, "_cut", counted)
    table = traceconv.read(src, workers=0)
    assert table.num_rows > 0
    assert 1 <= len(rounds) <= 6, rounds


@pytest.mark.slow
def test_a_600_mb_string_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    src = tmp_path / "huge_name.json"
    write_huge_string(src, 600 << 20)
    out = tmp_path / "out" / "huge.parquet"
    try:
        run = traceconv_cli("ingest", src, "-o", out, cwd=tmp_path, measure=True)
    finally:
        src.unlink()
    line = check_refused(run, src.name, (3,))
    assert re.search(r"\d+ MiB|larger|too large|limit", line), line
    assert not out.exists()


# -- output paths ----------------------------------------------------------------------------------
ODD_NAMES = ("..json", "...json", ".json", ".pt.trace.json", "-o.json", "x.json", "rank 0 (copy).pt.trace.json")


def files_outside(root: Path, folder: Path) -> set[Path]:
    return {p for p in root.rglob("*") if not p.is_relative_to(folder)}


def test_output_names_made_from_input_names_stay_inside_the_output_folder(tmp_path: Path) -> None:
    run_dir, out = tmp_path / "run", tmp_path / "out"
    run_dir.mkdir()
    real = (fixture("pytorch/h200/cuda_graph.json")).read_bytes()
    for name in ODD_NAMES:
        (run_dir / name).write_bytes(real)
    before = files_outside(tmp_path, out)
    run = traceconv_cli("ingest", run_dir, "-o", out, cwd=tmp_path)
    assert run.rc == 0, run.stderr
    assert files_outside(tmp_path, out) == before
    assert len([p for p in out.iterdir() if p.suffix == ".parquet"]) == len(ODD_NAMES)


def test_a_link_planted_in_the_output_folder_cannot_redirect_the_output(tmp_path: Path) -> None:
    run_dir, out = tmp_path / "run", tmp_path / "out"
    run_dir.mkdir()
    out.mkdir()
    shutil.copyfile(fixture("pytorch/h200/cuda_graph.json"), run_dir / "x.json")
    victim = tmp_path / "victim.parquet"
    victim.write_bytes(KNOWN)
    (out / "x.parquet").symlink_to(victim)
    before = files_outside(tmp_path, out)
    run = traceconv_cli("ingest", run_dir, "-o", out, cwd=tmp_path)
    assert run.rc in (0, 2), run.stderr  # replace the link, or refuse
    if run.rc:
        one_line(run, "x.parquet")
    assert victim.read_bytes() == KNOWN
    assert files_outside(tmp_path, out) == before


def test_two_inputs_with_one_output_name_are_a_usage_error(tmp_path: Path) -> None:
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        shutil.copyfile(fixture("pytorch/h200/cuda_graph.json"), tmp_path / sub / "rank0.json")
    out = tmp_path / "out"
    run = traceconv_cli("ingest", "a/rank0.json", "b/rank0.json", "-o", out, cwd=tmp_path)
    assert run.rc == 2
    one_line(run, "rank0.json")
    assert listing(out) == {}


def test_a_report_without_nsys_says_the_tool_is_missing(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "NSYS"}
    env["PATH"] = str(Path(sys.executable).parent)
    if shutil.which("nsys", path=env["PATH"]):
        pytest.skip("nsys is installed beside this Python")
    src = fixture("nsys/h200/buggy.nsys-rep")
    out = tmp_path / "out" / "buggy.parquet"
    run = traceconv_cli("nsys", src, "-o", out, cwd=tmp_path, env=env)
    assert run.rc == 5, run.stderr
    assert "nsys" in one_line(run, src.name).lower()
    assert not out.exists()
