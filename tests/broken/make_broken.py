"""Make a corpus of broken inputs from real traces, each with its expected outcome.

    python tests/broken/make_broken.py OUT_DIR [--seed N]

Every file is made from a real file of ``fixtures/`` (truncated, damaged, given an
invalid-JSON dialect that Kineto really wrote, cut as a gzip stream, a damaged or
thinned Nsight Systems export, or a real file that is not a trace) and described in
``OUT_DIR/manifest.json``: how it was made and what traceconv must answer. The expected
event counts are computed here by an independent parse (``json.JSONDecoder.raw_decode``
over the events array), never by traceconv. Same seed, same files.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import shutil
import sqlite3
import sys
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
try:
    from ..fixtures import fixture
except ImportError:  # run as a script
    sys.path.insert(0, str(ROOT))
    from tests.fixtures import fixture
STREAMS = fixture("pytorch/h200/streams_memcpy.json")
GRAPH = fixture("pytorch/h200/cuda_graph.json")
SEED_LINEAR = fixture("pytorch/h200/seed_linear.json")
TRITON = fixture("pytorch/h200/compiled_triton.json")
TRAIN = fixture("pytorch/h200/train_buggy.pt.trace.json.gz")  # 5 MB decompressed: more than one 4 MiB chunk
HTA = fixture(
    "pytorch/public/facebookresearch__HolisticTraceAnalysis__tests_data_trace_file_list_inference_rank_1.json.gz"
)
AMD = fixture("pytorch/public/AMD-AGI__TraceLens__tests_traces_inference_vllm_decode_full_graph_execution.json.gz")
NSYS = fixture("nsys/h200/fixed.sqlite")
STATS_CSV = fixture("nsys/h200/nsys-stats/fixed.cuda_api_sum.csv")
KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"

SEED = 7
NEST_DEPTH = 100_000
EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
INTERNAL_CUT = re.compile(rb"\}\s*,\s*\{")  # an event boundary pattern inside one event


@dataclass
class Case:
    """One broken input and what traceconv must answer; the fields of one manifest entry."""

    file: str  # name in OUT_DIR (a directory for the "no traces" case)
    source: str  # the real file it was made from, relative to the repository
    how: str
    group: str  # truncated, gzip_cut, damaged, dialect, not_a_trace, sqlite, hostile
    command: str = "ingest"
    exit: list[int] = field(default_factory=lambda: [3])  # acceptable exit codes without --salvage
    error: list[str] = field(default_factory=list)  # all must be in the error line (case-insensitive)
    error_any: list[str] = field(default_factory=list)  # one of them must be
    events: int | None = None  # rows written when the exit code is 0
    salvage: dict[str, Any] | None = None  # {"exit": 6, "events": n, "keep": {"prefix": n} | {"drop": [i]}}
    notes: list[dict[str, Any]] = field(default_factory=list)  # [{"any": [words], "counts": [n]}] on stdout
    names: list[dict[str, Any]] = field(default_factory=list)  # [{"index": i, "equals"|"prefix"+"suffix": s}]
    kinds_absent: list[str] = field(default_factory=list)
    rows_removed: int | None = None  # exit 0: rows fewer than the source's own conversion
    arg_key: dict[str, Any] | None = None  # exit 0: {"index": i, "key": k} that must survive in args
    args_valid: list[dict[str, Any]] = field(default_factory=list)  # exit 0: args of row i: valid JSON with key k


# -- an independent reading of the events array ----------------------------------------------
@dataclass
class Trace:
    """A real trace's decompressed bytes and the byte span of each event of ``traceEvents``."""

    path: Path
    data: bytes
    array_start: int  # just after "["
    array_end: int  # the "]"
    spans: list[tuple[int, int]]  # [start, end) of each event: end is just after its "}"

    @property
    def rel(self) -> str:
        return str(self.path.relative_to(ROOT)) if self.path.is_relative_to(ROOT) else str(self.path)


def read_bytes(path: Path) -> bytes:
    raw = path.read_bytes()
    return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw


def walk_events(text: str, i: int) -> tuple[list[tuple[int, int]], int | None]:
    """Spans of the complete events from ``i`` (inside the array) and the offset of ``]`` if reached.

    ``text`` is the bytes decoded as latin-1, so that string indices are byte offsets.
    """
    decoder = json.JSONDecoder()
    spans: list[tuple[int, int]] = []
    ws = re.compile(r"[ \t\r\n]*")
    while True:
        i = ws.match(text, i).end()  # type: ignore[union-attr]
        if i >= len(text):
            return spans, None
        if text[i] == "]":
            return spans, i
        try:
            _, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            return spans, None
        spans.append((i, end))
        i = ws.match(text, end).end()  # type: ignore[union-attr]
        if text[i : i + 1] == ",":
            i += 1


def events_array_start(data: bytes) -> int:
    m = EVENTS_KEY.search(data)
    if m is None:
        raise ValueError("no traceEvents array")
    return m.end()


def complete_events(prefix: bytes) -> int:
    """Events whose closing ``}`` lies in ``prefix``: what --salvage must keep of a cut trace."""
    spans, _ = walk_events(prefix.decode("latin-1"), events_array_start(prefix))
    return len(spans)


def load_trace(path: Path) -> Trace:
    data = read_bytes(path)
    start = events_array_start(data)
    spans, end = walk_events(data.decode("latin-1"), start)
    if end is None:
        raise ValueError(f"{path}: not a complete trace")
    return Trace(path, data, start, end, spans)


def top_level_positions(event: bytes, wanted: int) -> list[int]:
    """Offsets in ``event`` of the byte ``wanted`` outside strings, at nesting depth 1."""
    found, depth, i = [], 0, 0
    while i < len(event):
        c = event[i]
        if c == 0x22:  # skip to the closing quote, stepping over escapes
            i += 1
            while event[i] != 0x22:
                i += 2 if event[i] == 0x5C else 1
        elif c in b"{[":
            depth += 1
        elif c in b"}]":
            depth -= 1
        elif c == wanted and depth == 1:
            found.append(i)
        i += 1
    return found


# -- truncation ---------------------------------------------------------------------------
def truncated_case(t: Trace, cut: int, file: str, how: str) -> tuple[Case, bytes]:
    kept = complete_events(t.data[:cut])
    assert kept == sum(1 for _, end in t.spans if end <= cut)  # two ways, one answer
    case = Case(
        file=file,
        source=t.rel,
        group="truncated",
        how=f"{how}: cut at byte {cut:,} of {len(t.data):,} (decompressed), inside the events array",
        error=["truncated", "--salvage", f"{kept:,} complete events"],
        salvage={"exit": 6, "events": kept, "keep": {"prefix": kept}},
    )
    return case, t.data[:cut]


def truncations(t: Trace, rng: random.Random, stem: str, n_random: int, boundaries: bool) -> list[tuple[Case, bytes]]:
    lo, hi = t.spans[0][1] + 1, t.array_end - 1
    cuts = [(rng.randrange(lo, hi), f"r{i}", "random offset") for i in range(n_random)]
    if boundaries:
        k = rng.randrange(1, len(t.spans) - 2)
        end, nxt = t.spans[k][1], t.spans[k + 1][0]
        cuts += [
            (end - 1, "before_brace", f"just before the closing brace of event {k}"),
            (end, "after_brace", f"just after the closing brace of event {k}"),
            (end + 1, "after_comma", f"just after the comma following event {k}"),
            (nxt + 1, "after_open", f"just after the opening brace of event {k + 1}"),
        ]
    return [truncated_case(t, cut, f"{stem}.trunc_{tag}.json.tmp", how) for cut, tag, how in cuts]


def gzip_cuts(t: Trace, raw_gz: bytes, rng: random.Random, stem: str, n: int) -> list[tuple[Case, bytes]]:
    """The compressed stream cut short, at offsets whose decompressible prefix ends among the events."""
    out: list[tuple[Case, bytes]] = []
    while len(out) < n:
        cut = rng.randrange(len(raw_gz) // 5, len(raw_gz) * 9 // 10)
        prefix = zlib.decompressobj(wbits=31).decompress(raw_gz[:cut])
        if not t.spans[0][1] < len(prefix) < t.array_end:
            continue
        kept = complete_events(prefix)
        case = Case(
            file=f"{stem}.gzcut{len(out)}.json.gz",
            source=t.rel,
            group="gzip_cut",
            how=f"gzip stream cut at byte {cut:,} of {len(raw_gz):,}: {len(prefix):,} bytes decompress",
            error=["--salvage", f"{kept:,} complete events"],
            salvage={"exit": 6, "events": kept, "keep": {"prefix": kept}},
        )
        out.append((case, raw_gz[:cut]))
    return out


# -- damage in the middle -------------------------------------------------------------------
FLIP_MASKS = (0x01, 0x02, 0x04, 0x08, 0x10, 0x40)  # ':' -> ';' '8' '>' '2' '*' 'z': never valid there


def damageable(t: Trace, k: int) -> list[int]:
    """Absolute offsets of the ``:`` after a top-level key of event k, if resynchronising after it is exact."""
    s, e = t.spans[k]
    event = t.data[s:e]
    if INTERNAL_CUT.search(event):
        return []
    return [s + i for i in top_level_positions(event, ord(":"))]


def damaged_case(t: Trace, which: list[int], rng: random.Random, file: str, how: str) -> tuple[Case, bytes]:
    data = bytearray(t.data)
    offsets = []
    for k in which:
        at = rng.choice(damageable(t, k))
        data[at] ^= rng.choice(FLIP_MASKS)
        offsets.append(at)
    first = min(offsets)
    case = Case(
        file=file,
        source=t.rel,
        group="damaged",
        how=f"{how}: one bit flipped in the ':' after a key of event(s) {which} at byte(s) "
        + ", ".join(f"{o:,}" for o in offsets),
        error=["--salvage"],
        error_any=[f"byte {first:,}", f"byte {first}"],
        salvage={"exit": 6, "events": len(t.spans) - len(which), "keep": {"drop": sorted(which)}},
    )
    return case, bytes(data)


def damages(t: Trace, rng: random.Random, stem: str, full: bool) -> list[tuple[Case, bytes]]:
    ok = [k for k in range(len(t.spans)) if damageable(t, k)]
    mid = [k for k in ok if 0 < k < len(t.spans) - 1]
    cases = [damaged_case(t, [rng.choice(mid)], rng, f"{stem}.damaged_mid.json", "damage in the middle")]
    if full:
        a, b = sorted(rng.sample(mid, 2))
        cases += [
            damaged_case(t, [a, b], rng, f"{stem}.damaged_two.json", "two damaged events"),
            damaged_case(t, [ok[0]], rng, f"{stem}.damaged_first.json", "damage in the first event"),
            damaged_case(t, [ok[-1]], rng, f"{stem}.damaged_last.json", "damage in the last event"),
        ]
    return cases


def bit_flips(t: Trace, rng: random.Random, stem: str) -> list[tuple[Case, bytes]]:
    """Single bit flips that leave a well-formed prefix with a wrongly typed value before the syntax error."""
    k = rng.choice(
        [
            k
            for k in range(1, len(t.spans) - 1)
            if damageable(t, k)
            and NAME_VALUE.search(t.data, *t.spans[k])
            and not INTERNAL_CUT.search(t.data[slice(*t.spans[k])])
        ]
    )
    m = re.compile(rb'"name":( )"').search(t.data, *t.spans[k])
    assert m is not None
    at = m.start(1)
    name_flip = t.data[:at] + b"0" + t.data[at + 1 :]  # ' ' ^ 0x10: "name":0"aten::mm"
    first = len(t.data) - len(t.data.lstrip())
    brace_flip = t.data[:first] + b"[" + t.data[first + 1 :]  # '{' ^ 0x20
    return [
        (
            Case(
                f"{stem}.flip_name_space.json",
                t.rel,
                group="damaged",
                how=f'one bit flipped at byte {at:,}: the space after "name": of event {k} became 0',
                error=["--salvage"],
                error_any=[f"byte {n:,}" for n in (at, at + 1)] + [f"byte {at}", f"byte {at + 1}"],
                salvage={"exit": 6, "events": len(t.spans) - 1, "keep": {"drop": [k]}},
            ),
            name_flip,
        ),
        (
            Case(
                f"{stem}.flip_first_brace.json",
                t.rel,
                group="damaged",
                exit=[3, 4],
                how=f"one bit flipped at byte {first:,}: the document's opening brace became [",
            ),
            brace_flip,
        ),
    ]


# -- invalid-JSON dialects ------------------------------------------------------------------
NAME_VALUE = re.compile(rb'"name":\s*"((?:[^"\\]|\\.)*)"')
NUMBER_ARG = re.compile(rb'"([^"\\]+)":\s*(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)(?=\s*[,}])')
LIST_END = re.compile(rb"\d(\])")
STRING_ARG = re.compile(rb'"([^"\\]+)":\s*"([^"\\]*)"')
ARGS_END = re.compile(rb'(["\d\]el])(\s*\}\s*\}\s*)$')  # last value of args, then args' and the event's braces


class Injector:
    """Rewrites chosen events of a real trace; every rewritten event is a different one."""

    def __init__(self, t: Trace, rng: random.Random) -> None:
        self.t, self.rng = t, rng
        self.edits: dict[int, bytes] = {}
        self.names: list[dict[str, Any]] = []
        self.args: list[dict[str, Any]] = []  # string arguments given a raw byte

    def pick(self, test: Callable[[bytes], bool]) -> int:
        free = [
            k
            for k, (s, e) in enumerate(self.t.spans)
            if k not in self.edits and 0 < k < len(self.t.spans) - 1 and test(self.t.data[s:e])
        ]
        return self.rng.choice(free)

    def event(self, k: int) -> bytes:
        s, e = self.t.spans[k]
        return self.edits.get(k, self.t.data[s:e])

    def name(self, make: Callable[[str], tuple[bytes, dict[str, str]]]) -> None:
        """Replace a plain ASCII name by ``make(old) -> (raw bytes written, expected name check)``."""

        def plain(ev: bytes) -> bool:
            m = NAME_VALUE.search(ev)
            return bool(m and m.group(1).isascii() and b"\\" not in m.group(1))

        k = self.pick(plain)
        ev = self.event(k)
        m = NAME_VALUE.search(ev)
        assert m is not None
        raw, expect = make(m.group(1).decode())
        self.edits[k] = ev[: m.start(1)] + raw + ev[m.end(1) :]
        self.names.append({"index": k, **expect})

    def bare(self, token: bytes) -> int:
        k = self.pick(lambda ev: b'"args"' in ev and bool(NUMBER_ARG.search(ev, ev.find(b'"args"'))))
        ev = self.event(k)
        hits = list(NUMBER_ARG.finditer(ev, ev.find(b'"args"')))
        m = self.rng.choice(hits)
        self.edits[k] = ev[: m.start(2)] + token + ev[m.end(2) :]
        return k

    def string_arg(self, byte: bytes) -> None:
        """Put a raw byte in the middle of a string argument; its key must survive in valid JSON args."""
        k = self.pick(lambda ev: b'"args"' in ev and bool(STRING_ARG.search(ev, ev.find(b'"args"'))))
        ev = self.event(k)
        m = STRING_ARG.search(ev, ev.find(b'"args"'))
        assert m is not None
        self.edits[k] = ev[: m.end(2)] + byte + b"tail" + ev[m.end(2) :]
        self.args.append({"index": k, "key": m.group(1).decode()})

    def trailing_comma_in_args(self) -> None:
        k = self.pick(lambda ev: b'"args"' in ev and bool(ARGS_END.search(ev)))
        ev = self.event(k)
        m = ARGS_END.search(ev)
        assert m is not None
        self.edits[k] = ev[: m.end(1)] + b"," + ev[m.end(1) :]

    def trailing_comma_in_list(self) -> None:
        k = self.pick(lambda ev: b'"args"' in ev and bool(LIST_END.search(ev, ev.find(b'"args"'))))
        ev = self.event(k)
        m = LIST_END.search(ev, ev.find(b'"args"'))
        assert m is not None
        self.edits[k] = ev[: m.start(1)] + b"," + ev[m.start(1) :]

    def render(self, after_last: bytes = b"") -> bytes:
        parts, pos = [], 0
        for k in sorted(self.edits):
            s, e = self.t.spans[k]
            parts += [self.t.data[pos:s], self.edits[k]]
            pos = e
        last_end = self.t.spans[-1][1]
        if pos <= last_end:
            parts.append(self.t.data[pos:last_end])
            pos = last_end
        return b"".join(parts) + after_last + self.t.data[pos:]


def _quote(old: str, i: int) -> tuple[bytes, dict[str, str]]:
    new = [f'{old} "fwd" pass', f'{old} 12" tall', f'"{old}" x'][i % 3]
    return new.encode(), {"equals": new}


def _backslash(old: str, i: int) -> tuple[bytes, dict[str, str]]:
    new = [f"{old} C:\\Dev", f"{old} \\q", f"{old} D:\\Work"][i % 3]
    return new.encode(), {"equals": new}


def _raw_byte(byte: bytes) -> Callable[[str], tuple[bytes, dict[str, str]]]:
    def make(old: str) -> tuple[bytes, dict[str, str]]:
        return old.encode() + byte + b"tail", {"prefix": old, "suffix": "tail"}

    return make


DIALECTS: dict[str, tuple[list[str], str]] = {  # name -> (note words, one of which names the repair; how)
    "quotes": (["quote"], 'unescaped " inside 3 names'),
    "backslash": (["backslash", "escape"], "a \\ that is no valid escape in 3 names"),
    "control": (["control"], "raw control bytes \\x01 \\x07 \\x1b in 3 names"),
    "control_tab": (["control"], "a raw TAB byte inside 1 name"),
    "utf8": (["utf-8", "utf8"], "invalid UTF-8 bytes \\xe9 \\xff \\x80 in 3 names"),
    "utf8_args": (["utf-8", "utf8"], "invalid UTF-8 bytes \\xe9 \\xff \\x80 in 3 string arguments"),
    "control_args": (["control"], "raw control bytes \\x01 \\x07 \\x1b in 3 string arguments"),
    "bare_inf": (["inf", "bare"], "bare inf, -inf, inf as 3 argument values"),
    "bare_nan": (["nan", "bare"], "bare NaN, nan, NaN as 3 argument values"),
    "bare_na": (["n/a", "bare"], "bare N/A as 3 argument values"),
    "trailing_comma_args": (["trailing comma"], "trailing commas in 2 args objects and 1 args list"),
    "trailing_comma_array": (["trailing comma"], "a trailing comma after the last event"),
}


def inject(inj: Injector, dialect: str) -> tuple[int, bytes]:
    """Apply one dialect; returns (number of defects, bytes to put after the last event)."""
    if dialect in ("quotes", "backslash"):
        make = _quote if dialect == "quotes" else _backslash
        for i in range(3):
            inj.name(lambda old, i=i: make(old, i))  # type: ignore[misc]
    elif dialect in ("control", "utf8", "control_tab"):
        raw = {"control": [b"\x01", b"\x07", b"\x1b"], "utf8": [b"\xe9", b"\xff", b"\x80"], "control_tab": [b"\t"]}
        for byte in raw[dialect]:
            inj.name(_raw_byte(byte))
        return len(raw[dialect]), b""
    elif dialect in ("utf8_args", "control_args"):
        for byte in (b"\xe9", b"\xff", b"\x80") if dialect == "utf8_args" else (b"\x01", b"\x07", b"\x1b"):
            inj.string_arg(byte)
    elif dialect.startswith("bare_"):
        tokens = {"bare_inf": [b"inf", b"-inf", b"inf"], "bare_nan": [b"NaN", b"nan", b"NaN"], "bare_na": [b"N/A"] * 3}
        for token in tokens[dialect]:
            inj.bare(token)
    elif dialect == "trailing_comma_args":
        inj.trailing_comma_in_args()
        inj.trailing_comma_in_args()
        inj.trailing_comma_in_list()
    elif dialect == "trailing_comma_array":
        return 1, b","
    return 3, b""


def dialect_cases(t: Trace, rng: random.Random, stem: str, which: list[str]) -> list[tuple[Case, bytes]]:
    out = []
    for dialect in which:
        inj = Injector(t, rng)
        count, after = inject(inj, dialect)
        words, how = DIALECTS[dialect]
        counts = [count, 2 * count] if dialect == "quotes" else [count]  # per name, or per quote
        out.append(
            (
                Case(
                    file=f"{stem}.dialect_{dialect}.json",
                    source=t.rel,
                    group="dialect",
                    how=how,
                    exit=[0],
                    events=len(t.spans),
                    names=inj.names,
                    args_valid=inj.args,
                    notes=[{"any": words, "counts": counts}],
                ),
                inj.render(after),
            )
        )
    return out


def all_dialects_case(t: Trace, rng: random.Random, stem: str) -> tuple[Case, bytes]:
    inj = Injector(t, rng)
    notes = []
    for dialect in ("quotes", "backslash", "control", "utf8", "bare_inf", "bare_na", "trailing_comma_args"):
        count, _ = inject(inj, dialect)
        words, counts = DIALECTS[dialect][0], [count]
        if dialect == "quotes":  # counted per name or per quote
            counts = [count, 2 * count]
        if dialect.startswith("bare_"):  # one note for both kinds of bare value, or one each
            words, counts = [dialect.removeprefix("bare_").replace("na", "n/a")], [count, 2 * count]
        notes.append({"any": words, "counts": counts})
    case = Case(
        file=f"{stem}.dialect_all.json",
        source=t.rel,
        group="dialect",
        exit=[0],
        events=len(t.spans),
        how="every dialect at once, each in different events",
        names=inj.names,
        notes=notes,
    )
    return case, inj.render()


def deep_nesting_case(t: Trace, rng: random.Random) -> tuple[Case, bytes]:
    inj = Injector(t, rng)
    k = inj.pick(lambda ev: b'"args": {' in ev)
    ev = inj.event(k)
    at = ev.index(b'"args": {') + len(b'"args": {')
    inj.edits[k] = ev[:at] + b'"deep": ' + b"[" * NEST_DEPTH + b"]" * NEST_DEPTH + b", " + ev[at:]
    case = Case(
        file="deep_nesting.json",
        source=t.rel,
        group="hostile",
        exit=[0, 3, 4],
        events=len(t.spans),
        how=f"an argument nested {NEST_DEPTH:,} lists deep in event {k}; either a clear error or "
        "converted with that argument kept (as text)",
        arg_key={"index": k, "key": "deep"},
    )
    return case, inj.render()


# -- not traces, gzip damage ---------------------------------------------------------------
def not_a_trace_cases(t: Trace) -> list[tuple[Case, bytes]]:
    header = t.data[: t.array_start]
    header = EVENTS_KEY.sub(b"", header).rstrip().rstrip(b",") + b"\n}\n"
    csv = STATS_CSV.read_bytes()
    streams_gz = gzip.compress(t.data, mtime=0)
    bad_method = streams_gz[:2] + b"\x07" + streams_gz[3:]
    garbled = bytearray(streams_gz)
    garbled[10:400] = random.Random(SEED).randbytes(390)
    rel = t.rel
    return [
        (Case("empty.json", rel, "an empty file (a run killed before writing)", "not_a_trace", error=["empty"]), b""),
        (
            Case("empty.json.gz", rel, "a valid gzip stream of nothing", "not_a_trace", error=["empty"]),
            gzip.compress(b"", mtime=0),
        ),
        (
            Case(
                "no_events.json",
                rel,
                "the trace with every event removed: its traceEvents array is empty",
                "not_a_trace",
                error=["no events", "empty"],
            ),
            t.data[: t.array_start] + t.data[t.array_end :],
        ),
        (
            Case(
                "empty_array.json",
                rel,
                "hand-made: a bare event array with nothing in it",
                "not_a_trace",
                error=["no events"],
            ),
            b"[]\n",
        ),
        (
            Case(
                "kernel_summary.json",
                str(STATS_CSV.relative_to(ROOT)),
                "nsys stats CSV output named .json",
                "not_a_trace",
                exit=[4],
                error_any=["not a", "neither", "unsupported"],
            ),
            csv,
        ),
        (
            Case(
                "no_trace_events.json",
                rel,
                "the trace's top-level keys with traceEvents removed",
                "not_a_trace",
                exit=[4],
                error=["traceEvents"],
            ),
            header,
        ),
        (
            Case(
                "bad_method.json.gz",
                rel,
                "gzip header with compression method 7 (not deflate)",
                "gzip_damaged",
                error_any=["gzip", "damaged", "corrupt", "compress"],
            ),
            bad_method,
        ),
        (
            Case(
                "garbled.json.gz",
                rel,
                "deflate data overwritten with random bytes after the gzip header",
                "gzip_damaged",
                error_any=["gzip", "damaged", "corrupt", "compress", "invalid"],
            ),
            bytes(garbled),
        ),
    ]


# -- SQLite -------------------------------------------------------------------------------
def sqlite_cases(out: Path, rng: random.Random) -> list[Case]:
    src = str(NSYS.relative_to(ROOT))
    cases = []
    lab = out / "lab_results.sqlite"
    with sqlite3.connect(lab) as db:
        db.execute("CREATE TABLE samples (id INTEGER PRIMARY KEY, start INTEGER, end INTEGER, name TEXT)")
        db.executemany(
            "INSERT INTO samples (start, end, name) VALUES (?, ?, ?)",
            [(i, i + rng.randrange(1, 100), f"s{i}") for i in range(50)],
        )
    db.close()
    for command in ("ingest", "nsys"):
        cases.append(
            Case(
                lab.name,
                "(made with sqlite3)",
                f"an SQLite database that is not an nsys export ({command})",
                "sqlite",
                command=command,
                exit=[4],
                error_any=["nsight", "nsys"],
            )
        )
    page = 4096
    with sqlite3.connect(f"file:{NSYS}?mode=ro", uri=True) as db:
        page = db.execute("PRAGMA page_size").fetchone()[0]
        root = db.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (KERNEL_TABLE,)).fetchone()[0]
        kernels = db.execute(f"SELECT count(*) FROM {KERNEL_TABLE}").fetchone()[0]
    db.close()
    raw = NSYS.read_bytes()
    damaged = [
        (
            "kernel_root",
            f"page {root} (root of {KERNEL_TABLE}) overwritten with random bytes",
            _overwrite(raw, (root - 1) * page, page, rng),
        ),
        (
            "schema_page",
            "page 1 after the 100-byte header (the schema) overwritten with random bytes",
            _overwrite(raw, 100, page - 100, rng),
        ),
        ("cut_in_half", f"cut at byte {len(raw) // 2:,} of {len(raw):,}", raw[: len(raw) // 2]),
    ]
    for tag, how, data in damaged:
        (out / f"fixed.{tag}.sqlite").write_bytes(data)
        cases.append(
            Case(
                f"fixed.{tag}.sqlite",
                src,
                how,
                "sqlite",
                command="nsys",
                exit=[3],
                error_any=["corrupt", "damaged", "malformed", "not a database", "readable"],
            )
        )
    cases.append(_dropped(out, src, "no_kernels", [KERNEL_TABLE], ["kernel"], kernels))
    cupti = [
        "CUPTI_ACTIVITY_KIND_KERNEL",
        "CUPTI_ACTIVITY_KIND_MEMCPY",
        "CUPTI_ACTIVITY_KIND_MEMSET",
        "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
        "CUPTI_ACTIVITY_KIND_RUNTIME",
        "CUPTI_ACTIVITY_KIND_CUDA_EVENT",
    ]
    cases.append(_dropped(out, src, "no_cupti", cupti, ["kernel", "memcpy", "memset", "cuda_api", "sync"], None))
    return cases


def _overwrite(raw: bytes, at: int, n: int, rng: random.Random) -> bytes:
    return raw[:at] + rng.randbytes(n) + raw[at + n :]


def _dropped(out: Path, src: str, tag: str, tables: list[str], absent: list[str], removed: int | None) -> Case:
    path = out / f"fixed.{tag}.sqlite"
    shutil.copyfile(NSYS, path)
    path.chmod(0o644)
    with sqlite3.connect(path) as db:
        for table in tables:
            db.execute(f"DROP TABLE {table}")
    db.close()
    return Case(
        path.name,
        src,
        f"a copy with {', '.join(tables)} dropped",
        "sqlite",
        command="nsys",
        exit=[0],
        kinds_absent=absent,
        rows_removed=removed,
    )


# -- the whole corpus -----------------------------------------------------------------------
def json_cases(rng: random.Random) -> list[tuple[Case, bytes]]:
    streams, graph, seed, triton = (load_trace(p) for p in (STREAMS, GRAPH, SEED_LINEAR, TRITON))
    train, hta, amd = (load_trace(p) for p in (TRAIN, HTA, AMD))
    made: list[tuple[Case, bytes]] = []
    made += truncations(streams, rng, "streams_memcpy", 2, boundaries=True)
    made += truncations(graph, rng, "cuda_graph", 1, boundaries=True)
    for t, stem in (
        (seed, "seed_linear"),
        (triton, "compiled_triton"),
        (hta, "hta_inference"),
        (amd, "amd_vllm"),
        (train, "train_buggy"),
    ):
        made += truncations(t, rng, stem, 1, boundaries=False)
    made += gzip_cuts(train, TRAIN.read_bytes(), rng, "train_buggy", 2)
    made += gzip_cuts(streams, gzip.compress(streams.data, mtime=0), rng, "streams_memcpy", 1)
    made += damages(streams, rng, "streams_memcpy", full=True)
    made += bit_flips(streams, rng, "streams_memcpy")
    for t, stem in ((graph, "cuda_graph"), (seed, "seed_linear"), (train, "train_buggy")):
        made += damages(t, rng, stem, full=False)
    made += dialect_cases(streams, rng, "streams_memcpy", list(DIALECTS))
    made.append(all_dialects_case(seed, rng, "seed_linear"))
    made.append(deep_nesting_case(streams, rng))
    made += not_a_trace_cases(streams)
    return made


def generate(out: Path, seed: int = SEED) -> list[Case]:
    """Write every broken input into ``out`` and ``out/manifest.json``; returns the cases."""
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    cases = []
    for case, data in json_cases(rng):
        (out / case.file).write_bytes(data)
        cases.append(case)
    folder = out / "no_traces"
    folder.mkdir(exist_ok=True)
    shutil.copyfile(STATS_CSV, folder / STATS_CSV.name)
    cases.append(
        Case(
            "no_traces",
            str(STATS_CSV.relative_to(ROOT)),
            "a folder holding only a CSV file",
            "not_a_trace",
            exit=[3],
            error_any=["no trace"],
        )
    )
    cases += sqlite_cases(out, rng)
    names = [c.file + c.command for c in cases]
    assert len(names) == len(set(names)), "case names must be unique"
    manifest = {"seed": seed, "made_by": "tests/broken/make_broken.py", "cases": [asdict(c) for c in cases]}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return cases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="directory to write the broken files and manifest.json into")
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)
    cases = generate(args.out, args.seed)
    print(f"{len(cases)} broken inputs and manifest.json written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
