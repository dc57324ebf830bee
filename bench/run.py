"""`make bench`: traceconv and the alternatives side by side, as whole processes, in one table.

    .venv/bin/python bench/run.py                  # everything, median of 3 runs
    .venv/bin/python bench/run.py --quick          # 1 run, no slow alternatives
    .venv/bin/python bench/run.py --only traceconv,orjson --inputs big,small --runs 5

Every tool runs in a fresh process (bench/runner.py, or the tool's own command line) and
is measured from spawn to exit: wall time, and peak RSS of its process tree. The
alternatives are installed into bench/.venv-alt on first use, so that the product's venv
stays lean; one that cannot be installed shows as "n/a" with the reason. Plain Python on
purpose: stdlib and subprocess only. bench/README.md explains each row.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
DATA = BENCH / "data"
RESULTS = BENCH / "results"
PRODUCT = ROOT / ".venv" / "bin"
ALT = BENCH / ".venv-alt"
RUNNER = BENCH / "runner.py"

sys.path.insert(0, str(BENCH))
from runner import KERNEL_JOIN  # noqa: E402  (runner.py is stdlib-only at import time)

# pip requirements of the alternatives, by the module that proves them installed. DuckDB is
# pinned to the version whose sqlite extension is on PyPI (extensions are version-bound and
# cannot be downloaded at run time here).
ALT_PACKAGES = {
    "polars": ["polars"],
    "ijson": ["ijson"],
    "hta": ["HolisticTraceAnalysis"],
    "duckdb": ["duckdb==1.5.5"],
    "duckdb_extension_sqlite_scanner": ["duckdb==1.5.5", "duckdb-extension-sqlite-scanner==1.5.5"],
}


@dataclass
class Input:
    key: str  # for --inputs
    path: Path
    kind: str  # "json" or "sqlite"
    big: bool = False  # only tools that stream run on it (whole-document tools need ~8x its size)
    missing: str = ""
    optional: bool = False  # not in shared/: made on a GPU machine
    steps: str = ""  # --steps REGEX for the analyses of steps, where the input's names are not the default's


@dataclass
class Tool:
    key: str  # for --only
    label: str
    kind: str  # the inputs it reads: "json" or "sqlite"
    fn: str = ""  # function in runner.py, run by the venv's python
    venv: str = "product"  # or "alt"
    module: str = ""  # alt module that must import
    slow: bool = False  # skipped by --quick
    streams: bool = False  # runs on big inputs too
    argv: list[str] = field(default_factory=list)  # its own command line instead of runner.py

    def command(self, src: Path, out: Path, steps: str = "") -> list[str]:
        if self.argv:
            argv = [a for a in self.argv if a != "{steps}"]
            if steps and "{steps}" in self.argv:
                argv += ["--steps", steps]
            return [a.replace("{in}", str(src)).replace("{out}", str(out)) for a in argv]
        py = PRODUCT / "python" if self.venv == "product" else ALT / "bin" / "python"
        return [str(py), str(RUNNER), self.fn, str(src), str(out)]


def tools(sqlite3_cli: str | None) -> list[Tool]:
    tc = str(PRODUCT / "traceconv")
    sqlite_argv = [sqlite3_cli, "-readonly", "{in}", KERNEL_JOIN] if sqlite3_cli else ["sqlite3-not-on-PATH"]
    return [
        Tool("traceconv", "traceconv ingest", "json", streams=True,
             argv=[tc, "ingest", "{in}", "-o", "{out}/o.parquet"]),
        Tool("traceconv", "traceconv ingest --workers 0 (one process)", "json", streams=True,
             argv=[tc, "ingest", "{in}", "-o", "{out}/o.parquet", "--workers", "0"]),
        Tool("orjson", "orjson.loads alone", "json", "orjson_loads", streams=True),
        Tool("pandas", "orjson + pandas DataFrame + json_normalize + to_parquet", "json", "orjson_pandas", slow=True),
        Tool("duckdb", "DuckDB read_json + unnest, COPY TO parquet", "json", "duckdb_json", "alt", "duckdb", slow=True),
        Tool("polars", "Polars read_json + explode/unnest, write_parquet", "json", "polars_json", "alt", "polars"),
        Tool("ijson", "ijson streaming the events (count only)", "json", "ijson_count", "alt", "ijson", streams=True),
        Tool("hta", "HTA parse_trace_dataframe (json backend)", "json", "hta_json", "alt", "hta", slow=True),
        Tool("hta", "HTA parse_trace_dataframe (ijson_batch_and_compress)", "json", "hta_ijson", "alt", "hta",
             slow=True),
        Tool("traceconv", "traceconv ingest (a directory of ranks)", "ranks",
             argv=[tc, "ingest", "{in}", "-o", "{out}/o.parquet"]),
        Tool("traceconv", "traceconv ranks (converted on the fly)", "ranks",
             argv=[tc, "ranks", "{in}", "--format", "json"]),
        Tool("traceconv", "traceconv summary (converted on the fly)", "ranks", argv=[tc, "summary", "{in}"]),
        Tool("traceconv", "traceconv nsys", "sqlite", streams=True, argv=[tc, "nsys", "{in}", "-o", "{out}/o.parquet"]),
        Tool("pandas", "pandas.read_sql kernel-runtime join", "sqlite", "pandas_read_sql"),
        Tool("sqlite3", "sqlite3 CLI kernel-runtime join", "sqlite", argv=sqlite_argv),
        Tool("duckdb", "DuckDB sqlite scanner join, COPY TO parquet", "sqlite", "duckdb_sqlite", "alt",
             "duckdb_extension_sqlite_scanner"),
        Tool("traceconv", "traceconv summary", "parquet", streams=True, argv=[tc, "summary", "{in}"]),
        Tool("traceconv", "traceconv summary, TRACECONV_MEMORY=512MB", "parquet", streams=True,
             argv=["env", "TRACECONV_MEMORY=512MB", tc, "summary", "{in}"]),
        Tool("traceconv", "traceconv kernels", "parquet", streams=True, argv=[tc, "kernels", "{in}"]),
        Tool("traceconv", "traceconv summary --format json (the steps' critical path)", "parquet", streams=True,
             argv=[tc, "summary", "{in}", "--format", "json", "{steps}"]),
        Tool("traceconv", "traceconv whatif --remove syncs --format json", "parquet", streams=True,
             argv=[tc, "whatif", "{in}", "--remove", "syncs", "--format", "json", "{steps}"]),
        Tool("duckdb", "DuckDB: four group-bys on the Parquet", "parquet", "duckdb_group_bys", streams=True),
        Tool("duckdb", "DuckDB sqlite scanner: event tables + StringIds copied to Parquet", "sqlite",
             "duckdb_copy_tables", "alt", "duckdb_extension_sqlite_scanner", streams=True),
    ]  # fmt: skip


# -- inputs ----------------------------------------------------------------------------
def _atomic(out: Path, cmd: list[str], stdin: Path | None = None) -> None:
    """Run ``cmd`` with stdout to ``out.part``, then rename: an interrupted run leaves nothing."""
    tmp = out.with_name(out.name + ".part")
    print(f"making {out.relative_to(ROOT)} ...", file=sys.stderr, flush=True)
    with open(tmp, "wb") as fh, open(stdin, "rb") if stdin else open(os.devnull, "rb") as fin:
        subprocess.run(cmd, stdout=fh, stdin=fin, check=True)
    os.replace(tmp, out)


PARQUET_FROM = {"pq": "sqlite", "pq16": "sqlite16", "pqtrain": "big", "pqx4": "x4"}  # Parquet input -> its source
_SOURCES = {"sqlite": "big.sqlite", "sqlite16": "big_x16.sqlite", "big": "big_train.json", "x4": "big_train_x4.json"}


def prepare_inputs(shared: Path, wanted: set[str] | None) -> list[Input]:
    DATA.mkdir(parents=True, exist_ok=True)
    big, big_xz = DATA / "big_train.json", shared / "bench" / "big_train.json.xz"
    sql, sql_xz = DATA / "big.sqlite", shared / "bench" / "big.sqlite.xz"
    inputs = [
        Input("big", big, "json"),
        Input("gz", DATA / "big_train.json.gz", "json"),
        Input("x4", DATA / "big_train_x4.json", "json", big=True),
        Input("small", shared / "corpus" / "pytorch" / "h200" / "ddp_rank0.pt.trace.json", "json"),
        Input("sqlite", sql, "sqlite"),
        Input("sqlite4", DATA / "big_x4.sqlite", "sqlite", big=True),
        Input("sqlite16", DATA / "big_x16.sqlite", "sqlite", big=True),
        # The Parquet of four of them (made by traceconv): what the analyses' rows read.
        Input("pq", DATA / "big.parquet", "parquet"),
        Input("pq16", DATA / "big_x16.parquet", "parquet", big=True),
        # big_train marks no steps of the default names: its iterations begin with a `forward` range.
        Input("pqtrain", DATA / "big_train.parquet", "parquet", steps="^forward$"),
        Input("pqx4", DATA / "big_train_x4.parquet", "parquet", big=True, steps="^forward$"),
        Input("ranks", DATA / "ddp_x20", "ranks"),
        # Other shapes, held back from shared/ (made on the H200 by .gpu/big_shapes.py, see
        # bench/README.md): measured when present in bench/data/, "n/a" otherwise.
        Input("stack", DATA / "big2_conv_stack.json", "json", optional=True),
        Input("transformer", DATA / "big3_transformer.pt.trace.json.gz", "json", optional=True),
    ]
    inputs = [i for i in inputs if wanted is None or i.key in wanted]
    keys = {i.key for i in inputs}
    keys |= {made_from for key, made_from in PARQUET_FROM.items() if key in keys}  # an input's own input
    if keys & {"big", "gz", "x4"} and not big.exists() and big_xz.exists():
        _atomic(big, ["xz", "-dkc", str(big_xz)])
    if "gz" in keys and big.exists() and not (DATA / "big_train.json.gz").exists():
        _atomic(DATA / "big_train.json.gz", ["gzip", "-1", "-c"], stdin=big)
    if "x4" in keys and big.exists() and not (DATA / "big_train_x4.json").exists():
        out = DATA / "big_train_x4.json"
        print(f"making {out.relative_to(ROOT)} ...", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, str(BENCH / "make_big.py"), str(big), str(out), "--copies", "4"], check=True)
    if keys & {"sqlite", "sqlite4", "sqlite16"} and not sql.exists() and sql_xz.exists():
        _atomic(sql, ["xz", "-dkc", str(sql_xz)])
    for key, copies in (("sqlite4", 4), ("sqlite16", 16)):
        out = DATA / f"big_x{copies}.sqlite"
        if key in keys and sql.exists() and not out.exists():
            print(f"making {out.relative_to(ROOT)} ...", file=sys.stderr, flush=True)
            make = [sys.executable, str(BENCH / "make_big_nsys.py"), str(sql), str(out), "--copies", str(copies)]
            subprocess.run(make, check=True)
    by_key = {i.key: i for i in inputs}
    for key, made_from in PARQUET_FROM.items():
        src = DATA / Path(_SOURCES[made_from]).name
        out = DATA / (src.stem + ".parquet")
        command = "nsys" if src.suffix == ".sqlite" else "ingest"
        if key in by_key and src.exists() and not out.exists():
            print(f"making {out.relative_to(ROOT)} ...", file=sys.stderr, flush=True)
            subprocess.run([str(PRODUCT / "traceconv"), command, str(src), "-o", str(out)], check=True)
    if "ranks" in keys:
        _ranks(shared / "corpus" / "pytorch" / "h200", DATA / "ddp_x20", 20)
    for i in inputs:
        if not i.path.exists():
            where = "bench/README.md says how to make it" if i.optional else f"needs {shared}/bench/"
            i.missing = f"input missing: {i.path.name} ({where})"
    return inputs


def _ranks(corpus: Path, out: Path, copies: int) -> None:
    """The DDP pair, each rank repeated ``copies`` times in step with the other (make_big.py --span-of)."""
    pair = [corpus / f"ddp_rank{r}.pt.trace.json" for r in (0, 1)]
    if out.exists() or not all(p.exists() for p in pair):
        return
    tmp = out.with_name(out.name + ".part")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    print(f"making {out.relative_to(ROOT)} ...", file=sys.stderr, flush=True)
    for p in pair:
        other = [str(q) for q in pair if q != p]
        make = [sys.executable, str(BENCH / "make_big.py"), str(p), str(tmp / p.name), "--copies", str(copies)]
        subprocess.run([*make, "--span-of", *other], check=True)
    os.replace(tmp, out)


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.iterdir()) if path.is_dir() else path.stat().st_size


# -- the alternatives' venv ------------------------------------------------------------
def _imports(module: str) -> bool:
    py = ALT / "bin" / "python"
    return py.exists() and subprocess.run([str(py), "-c", f"import {module}"], capture_output=True).returncode == 0


def prepare_alt(modules: set[str]) -> dict[str, str]:
    """Install what is missing into bench/.venv-alt; module -> why it is unavailable."""
    if not modules:
        return {}
    if not (ALT / "bin" / "python").exists():
        print("creating bench/.venv-alt ...", file=sys.stderr, flush=True)
        made = subprocess.run([sys.executable, "-m", "venv", str(ALT)], capture_output=True, text=True)
        if made.returncode:
            return dict.fromkeys(modules, f"not installable: venv failed ({_last_line(made.stderr)})")
        base = ["orjson", "pandas", "pyarrow"]  # what the runner's own helpers and HTA lean on
        subprocess.run([str(ALT / "bin" / "pip"), "install", "-q", *base], capture_output=True)
    broken: dict[str, str] = {}
    for module in sorted(modules):
        if _imports(module):
            continue
        print(f"installing {' '.join(ALT_PACKAGES[module])} into bench/.venv-alt ...", file=sys.stderr, flush=True)
        pip = [str(ALT / "bin" / "pip"), "install", "-q", *ALT_PACKAGES[module]]
        done = subprocess.run(pip, capture_output=True, text=True, timeout=1800)
        if not _imports(module):
            broken[module] = f"not installable: {_last_line(done.stderr) or 'import failed after install'}"
    return broken


def versions() -> str:
    code = ("import importlib.metadata as m\nfor p in {}:\n    try: print(p, m.version(p))\n"
            "    except m.PackageNotFoundError: pass")  # fmt: skip
    lines = []
    for py, pkgs in ((PRODUCT / "python", ["traceconv", "orjson", "pandas", "pyarrow"]),
                     (ALT / "bin" / "python", ["polars", "duckdb", "ijson", "HolisticTraceAnalysis"])):  # fmt: skip
        if py.exists():
            got = subprocess.run([str(py), "-c", code.format(pkgs)], capture_output=True, text=True)
            lines += got.stdout.split("\n")
    return ", ".join(x for x in lines if x)


# -- measuring -------------------------------------------------------------------------
@dataclass
class Run:
    wall: float
    rss_mib: float
    ok: bool
    note: str
    pss_mib: float = 0.0


def _field_kib(text: str, key: str) -> int:
    return int(next((ln.split()[1] for ln in text.splitlines() if ln.startswith(key)), 0))


def _tree_kib(pid: int) -> tuple[int, int]:
    """(summed VmRSS, summed Pss) of ``pid`` and its descendants now (0 once they are gone).

    Summed RSS counts a page shared by several processes (a forked worker's inherited
    libraries and heap) once per process; PSS divides it among them, so the PSS sum is the
    memory the tree really holds.
    """
    rss, pss, todo = 0, 0, [pid]
    while todo:
        p = todo.pop()
        try:
            rss += _field_kib(Path(f"/proc/{p}/status").read_text(), "VmRSS:")
            pss += _field_kib(Path(f"/proc/{p}/smaps_rollup").read_text(), "Pss:")
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return rss, pss


def measure(cmd: list[str], timeout: float, out_dir: Path) -> Run:
    """Spawn ``cmd``, wait for it with wait4 (its own rusage), kill its group past ``timeout``.

    Peak RSS is the larger of ru_maxrss (the largest single process of the tree) and the
    largest sampled sum over the tree (processes working at the same time). Peak PSS is the
    largest sampled PSS sum (sampled every 50 ms, so a peak shorter than that can be missed).
    """
    log = out_dir / "stdout"
    with open(log, "wb") as out, open(out_dir / "stderr", "wb") as err:
        try:
            proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            return Run(0.0, 0.0, False, f"cannot start: {exc.strerror}")
        finished, timed_out = threading.Event(), threading.Event()
        peak = [0, 0]

        def watch() -> None:
            deadline = time.monotonic() + timeout
            while not finished.is_set():
                rss, pss = _tree_kib(proc.pid)
                peak[0], peak[1] = max(peak[0], rss), max(peak[1], pss)
                if time.monotonic() > deadline and not timed_out.is_set():
                    timed_out.set()
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                finished.wait(0.05)

        t0 = time.perf_counter()
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        finished.set()
        watcher.join()
    rss, pss = max(usage.ru_maxrss, peak[0]) / 1024, peak[1] / 1024
    if proc.returncode != 0:
        why = f"timed out after {timeout:.0f} s" if timed_out.is_set() else f"exit {proc.returncode}"
        return Run(wall, rss, False, f"failed ({why}): {_last_line((out_dir / 'stderr').read_text(errors='replace'))}")
    printed = log.read_text(errors="replace").splitlines()
    counts = [ln.strip() for ln in printed if " events" in ln or " rows" in ln]  # traceconv's "N events in ..."
    note = f"{len(printed):,} rows printed" if len(printed) > 10 else (counts or [_last_line("\n".join(printed))])[0]
    return Run(wall, rss, True, note, pss)


def _last_line(text: str) -> str:
    """The line that says most: the last one naming an error, else the last one."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip() and not ln.startswith("WARNING: Location")]
    errors = [ln for ln in lines if "rror" in ln]
    return ((errors or lines or [""])[-1])[:160].replace("|", "/")


def warm_cache(path: Path) -> None:
    """Read the input once so that every tool finds it in the page cache, not only the second."""
    for file in sorted(path.iterdir()) if path.is_dir() else [path]:
        with open(file, "rb") as fh:
            while fh.read(16 << 20):
                pass


def bench(tool: Tool, src: Input, runs: int, timeout: float, unavailable: str) -> tuple[Run | None, str]:
    """(median run, note); None when the tool could not run."""
    if src.missing:
        return None, f"n/a ({src.missing})"
    if unavailable:
        return None, f"n/a ({unavailable})"
    done: list[Run] = []
    for i in range(runs):
        out_dir = Path(tempfile.mkdtemp(prefix="run-", dir=DATA))
        try:
            run = measure(tool.command(src.path, out_dir, src.steps), timeout, out_dir)
        finally:
            shutil.rmtree(out_dir, ignore_errors=True)
        print(f"  {tool.label} on {src.path.name} [{i + 1}/{runs}]: {run.wall:.2f} s, "
              f"{run.rss_mib:,.0f} MiB RSS, {run.pss_mib:,.0f} MiB PSS {'' if run.ok else run.note}",
              file=sys.stderr, flush=True)  # fmt: skip
        if not run.ok:
            return run, run.note  # a failure does not get better by repeating it
        done.append(run)
    med = Run(
        statistics.median(r.wall for r in done),
        statistics.median(r.rss_mib for r in done),
        True,
        done[-1].note,
        statistics.median(r.pss_mib for r in done),
    )
    return med, med.note


# -- the table -------------------------------------------------------------------------
def _ratio(run: Run | None, ref: Run | None) -> str:
    if run is None or ref is None or not run.ok or not ref.ok or ref.wall <= 0:
        return "–"
    return f"{run.wall / ref.wall:.2f}x"


def table(rows: list[tuple[Tool, Input, Run | None, str]]) -> str:
    refs: dict[tuple[str, Path], Run | None] = {}
    for tool, src, run, _ in rows:
        if tool.key in ("orjson", "traceconv") and (tool.key, src.path) not in refs:  # the first traceconv row
            refs[(tool.key, src.path)] = run
    out = ["| tool | input | wall s (median) | peak RSS MiB (tree sum) | peak PSS MiB (tree) | wall / orjson.loads "
           "| wall / traceconv | note |",
           "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for tool, src, run, note in rows:
        size = f"{src.path.name} ({_size(src.path) / 2**20:,.0f} MiB)" if src.path.exists() else src.path.name
        ok = run is not None and run.ok
        wall = f"{run.wall:.2f}" if ok and run else "–"
        rss = f"{run.rss_mib:,.0f}" if ok and run else "–"
        pss = f"{run.pss_mib:,.0f}" if ok and run and run.pss_mib else "–"
        vs_orjson = _ratio(run, refs.get(("orjson", src.path))) if src.kind == "json" else "–"
        vs_tc = _ratio(run, refs.get(("traceconv", src.path)))
        out.append(f"| {tool.label} | {size} | {wall} | {rss} | {pss} | {vs_orjson} | {vs_tc} | {note} |")
    return "\n".join(out)


def nsys_targets(rows: list[tuple[Tool, Input, Run | None, str]]) -> str:
    """The scale issue's ratios: traceconv nsys against DuckDB's copy on the 16x export, and its 16x/1x memory."""
    got = {(t.fn or t.key, i.key): r for t, i, r, _ in rows if r is not None and r.ok}
    tc = {k: got.get(("traceconv", k)) for k in ("sqlite", "sqlite16")}
    duck = got.get(("duckdb_copy_tables", "sqlite16"))
    lines = []
    if tc["sqlite16"] and duck:
        lines.append(
            f"- 16x export: traceconv nsys {tc['sqlite16'].wall / duck.wall:.2f}x the time of DuckDB's copy "
            f"(target <= 1.0x), {tc['sqlite16'].pss_mib / max(duck.pss_mib, 1):.2f}x its peak PSS (target <= 2x)"
        )
    if tc["sqlite16"] and tc["sqlite"]:
        lines.append(
            f"- memory 16x / 1x: {tc['sqlite16'].pss_mib / max(tc['sqlite'].pss_mib, 1):.2f}x (target <= 1.3x)"
        )
    return "\n".join(lines)


def analysis_targets(rows: list[tuple[Tool, Input, Run | None, str]]) -> str:
    """The scale issue's ratios for the analyses: summary and kernels on the large Parquet against
    converting its source, and summary's memory on the large file against the small one."""
    got = {(t.label, i.key): r for t, i, r, _ in rows if r is not None and r.ok}
    lines = []
    for big, small, convert in (("pq16", "pq", "traceconv nsys"), ("pqx4", "pqtrain", "traceconv ingest")):
        made = got.get((convert, PARQUET_FROM[big]))
        for label, target in (("traceconv summary", 1.0), ("traceconv kernels", 0.5)):
            run = got.get((label, big))
            if run and made:
                lines.append(f"- {label} on {big}: {run.wall / made.wall:.2f}x the time of `{convert}` on its source "
                             f"(target <= {target}x)")  # fmt: skip
        run, base = got.get(("traceconv summary", big)), got.get(("traceconv summary", small))
        if run and base:
            lines.append(
                f"- summary memory {big} / {small}: {run.pss_mib / max(base.pss_mib, 1):.2f}x PSS, "
                f"{run.rss_mib / max(base.rss_mib, 1):.2f}x RSS (target <= 1.5x)"
            )
    return "\n".join(lines)


def whatif_targets(rows: list[tuple[Tool, Input, Run | None, str]]) -> str:
    """Issue 47's ratios: the what-if's critical path against the summary's (its JSON, the same steps),
    time and peak memory, on each Parquet input that has both."""
    got = {(t.label, i.key): r for t, i, r, _ in rows if r is not None and r.ok}
    lines = []
    for key in ("pq16", "pqtrain", "pqx4"):
        wi = got.get(("traceconv whatif --remove syncs --format json", key))
        base = got.get(("traceconv summary --format json (the steps' critical path)", key))
        if wi and base:
            lines.append(
                f"- whatif on {key}: {wi.wall / base.wall:.2f}x the time of its summary (target <= 2x), "
                f"{wi.pss_mib / max(base.pss_mib, 1):.2f}x its peak PSS, {wi.rss_mib / max(base.rss_mib, 1):.2f}x "
                "its peak RSS (target: flat, <= 1.3x)"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per tool and input; the median is shown")
    parser.add_argument("--quick", action="store_true", help="1 run, and skip the slow alternatives")
    parser.add_argument("--only", help="comma-separated tools: traceconv,orjson,pandas,duckdb,polars,ijson,hta,sqlite3")
    parser.add_argument(
        "--inputs",
        help="comma-separated inputs: big,gz,x4,small,sqlite,sqlite4,sqlite16,ranks,pq,pq16,pqtrain,pqx4,"
        "stack,transformer",
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds before a tool run is killed")
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared", help="the shared/ folder")
    parser.add_argument("--curve", default="big,x4", help="inputs of the scaling curve (bench/curve.py); '' for none")
    args = parser.parse_args()
    runs = 1 if args.quick else args.runs
    only = set(args.only.split(",")) if args.only else None
    wanted = set(args.inputs.split(",")) if args.inputs else None

    chosen = [t for t in tools(shutil.which("sqlite3")) if (only is None or t.key in only)
              and not (args.quick and t.slow)]  # fmt: skip
    inputs = prepare_inputs(args.shared, wanted)
    unavailable = prepare_alt({t.module for t in chosen if t.venv == "alt"})
    if not (PRODUCT / "traceconv").exists():
        sys.exit("bench: .venv is missing; run `make dev` first")

    rows: list[tuple[Tool, Input, Run | None, str]] = []
    for src in inputs:
        if src.path.exists():
            warm_cache(src.path)
        for tool in chosen:
            if tool.kind != src.kind or (src.big and not tool.streams):
                continue
            run, note = bench(tool, src, runs, args.timeout, unavailable.get(tool.module, ""))
            rows.append((tool, src, run, note))

    head = (f"traceconv bench, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; {os.cpu_count()} CPUs, "
            f"{platform.python_version()}; median of {runs} run(s), whole processes\n\n{versions()}\n")  # fmt: skip
    targets = "\n".join(t for t in (nsys_targets(rows), analysis_targets(rows), whatif_targets(rows)) if t)
    text = head + "\n" + table(rows) + "\n" + (f"\n{targets}\n" if targets else "")
    print(text)
    on_curve = [i for i in inputs if i.key in set(args.curve.split(",")) and (only is None or "traceconv" in only)]
    if on_curve:
        from curve import curves

        more = "\nScaling curve:\n\n" + curves(on_curve, runs)
        print(more)
        text += more
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "latest.md").write_text(text)


if __name__ == "__main__":
    main()
