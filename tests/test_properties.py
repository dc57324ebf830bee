"""Properties of the PyTorch reader on mutated real traces (hypothesis).

- A mutated trace gives a clean error (a ``TraceconvError``) or a valid traceconv Parquet
  file; never another exception, never a hang. Events are compared with an independent
  reading (stdlib ``json``) by their (name, ts) pairs.
- Truncated: an error without salvage; with it, exactly the complete events before the cut.
- k damaged bytes: at most k events of the output are not events of the original.
- Kineto's invalid-JSON dialects: repaired, every event kept, names as meant.
- Valid inputs round-trip: every event, name and argument survives the Parquet file.

Examples are derandomized (the same every run, no example database in the shared tree).
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import traceconv
from traceconv.errors import TraceconvError
from traceconv.readers.sorted_keys import SortedKeys

from .broken import make_broken as MB
from .conftest import fixture, real_files
from .kineto_truth import load, to_ns

HANG_S = 30  # one conversion of these small traces takes well under a second
# Each example converts a trace: 30 of them, or fewer under a profile that asks for fewer (`make
# test` loads Hypothesis' "fast" profile, tests/conftest.py).
PROPERTY = settings(
    max_examples=min(30, settings.default.max_examples),
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# While a property is xfail (pending the lead), do not spend time shrinking its known failure.
PENDING_PROPERTY = settings(PROPERTY, phases=(Phase.explicit, Phase.generate))

Event = tuple[Any, Any]  # (name, ts in ns relative to the trace's base)
SMALL = {
    "cuda_graph.json": "h200",
    "streams_memcpy.json": "h200",
    "facebookresearch__HolisticTraceAnalysis__tests_data_trace_file_list_inference_rank_1.json.gz": "public",
}
TRACES = {name: MB.load_trace(fixture(f"pytorch/{sub}/{name}")) for name, sub in SMALL.items()}
EVENTS = {
    name: [(e.get("name"), to_ns(e.get("ts"))) for e in load(fixture(f"pytorch/{sub}/{name}"))["traceEvents"]]
    for name, sub in SMALL.items()
}


class Hang(BaseException):
    """Not an Exception: nothing in traceconv may catch it."""


@contextlib.contextmanager
def no_hang(seconds: int = HANG_S) -> Iterator[None]:
    def alarm(signum: int, frame: Any) -> None:
        raise Hang(f"conversion still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def convert(data: bytes, **options: Any) -> list[Event] | TraceconvError:
    """Convert ``data`` in a fresh folder: the output's events, or the clean error. Nothing else may escape."""
    result = convert_with_args(data, **options)
    return result if isinstance(result, TraceconvError) else result[0]


def convert_with_args(data: bytes, **options: Any) -> tuple[list[Event], list[str | None]] | TraceconvError:
    with tempfile.TemporaryDirectory(prefix="traceconv-prop-") as tmp:
        src, out = Path(tmp) / "mutated.json", Path(tmp) / "out" / "mutated.parquet"
        src.write_bytes(data)
        try:
            with no_hang():
                traceconv.convert(src, out, **options)
        except TraceconvError as exc:
            assert not out.parent.exists() or not any(out.parent.iterdir()), "a failed run left files"
            return exc
        assert sorted(p.name for p in out.parent.iterdir()) == [out.name], "temporary files left beside the output"
        return events_of(out), traceconv.read_table(out, columns=["args"])["args"].to_pylist()


def events_of(out: Path) -> list[Event]:
    table = traceconv.read_table(out)  # checks the schema version too
    assert table["event_id"].to_pylist() == list(range(table.num_rows))
    base = int(traceconv.trace_metadata(out)["trace"].get("baseTimeNanoseconds") or 0)
    return [
        (n, None if s is None else s - base)
        for n, s in zip(table["name"].to_pylist(), table["start_ns"].to_pylist(), strict=True)
    ]


def foreign(got: list[Event], original: list[Event]) -> int:
    """How many output events (with multiplicity) are not events of the original."""
    return sum((Counter(got) - Counter(original)).values())


# -- truncation --------------------------------------------------------------------------------
@PROPERTY
@given(name=st.sampled_from(list(SMALL)), where=st.floats(0, 1, exclude_max=True))
def test_truncated_anywhere_is_an_error_and_salvage_keeps_the_complete_events(name: str, where: float) -> None:
    t = TRACES[name]
    cut = 1 + int(where * (len(t.data.rstrip()) - 2))
    prefix = t.data[:cut]
    assert isinstance(convert(prefix), TraceconvError)
    salvaged = convert(prefix, salvage=True)
    if cut <= t.array_start:  # nothing of the events array: nothing to salvage
        assert isinstance(salvaged, TraceconvError)
        return
    kept = MB.complete_events(prefix) if cut < t.array_end else len(t.spans)
    if kept == 0:  # cut inside the first event: an empty result or an error are both honest
        assert isinstance(salvaged, TraceconvError) or salvaged == []
        return
    assert salvaged == EVENTS[name][:kept]


# -- damaged bytes -----------------------------------------------------------------------------
mutation = st.tuples(
    st.sampled_from(["flip", "insert", "delete"]), st.floats(0, 1, exclude_max=True), st.integers(0, 255)
)


def mutate(data: bytes, edits: list[tuple[str, float, int]]) -> bytes:
    out = bytearray(data)
    for kind, where, value in edits:
        at = int(where * len(out))
        if kind == "flip":
            out[at] ^= 1 << (value % 8)
        elif kind == "insert":
            out.insert(at, value)
        else:
            del out[at]
    return bytes(out)


@PROPERTY
@given(name=st.sampled_from(list(SMALL)), edits=st.lists(mutation, min_size=1, max_size=3), salvage=st.booleans())
def test_damaged_bytes_never_crash_and_invent_at_most_one_event_each(
    name: str, edits: list[tuple[str, float, int]], salvage: bool
) -> None:
    result = convert(mutate(TRACES[name].data, edits), **({"salvage": True} if salvage else {}))
    if isinstance(result, TraceconvError):
        assert result.exit_code in (3, 4), result
        return
    assert len(result) <= len(EVENTS[name]) + len(edits)
    assert foreign(result, EVENTS[name]) <= len(edits)


@pytest.mark.parametrize("salvage", [False, True])
@pytest.mark.parametrize("edits", [[("brace", 0x20)], [("space", 0x10)]], ids=["first_brace", "name_space"])
def test_single_bit_flips_found_by_the_property_above(edits: list[tuple[str, int]], salvage: bool) -> None:
    """``{`` -> ``[`` at the start, or ``"name": "x"`` -> ``"name":0"x"``: a clean error, or salvage."""
    data = TRACES["cuda_graph.json"].data
    ((what, mask),) = edits
    at = len(data) - len(data.lstrip()) if what == "brace" else data.index(b'"name": "', 5000) + 7
    flipped = data[:at] + bytes([data[at] ^ mask]) + data[at + 1 :]
    result = convert(flipped, **({"salvage": True} if salvage else {}))
    assert isinstance(result, TraceconvError) or foreign(result, EVENTS["cuda_graph.json"]) == 0


@PROPERTY
@given(name=st.sampled_from(list(SMALL)), data=st.data())
def test_structural_damage_is_located_and_salvage_drops_only_the_damaged_events(name: str, data: Any) -> None:
    """A bit flipped in the ':' after a key: the error gives its byte; salvage drops just that event."""
    t = TRACES[name]
    candidates = [k for k in range(len(t.spans)) if MB.damageable(t, k)]
    which = sorted(set(data.draw(st.lists(st.sampled_from(candidates), min_size=1, max_size=3))))
    case, damaged = MB.damaged_case(t, which, random.Random(data.draw(st.integers(0, 2**32))), "x", "x")
    error = convert(damaged)
    assert isinstance(error, TraceconvError) and error.exit_code == 3
    assert any(w in error.message for w in case.error_any), error.message
    salvaged = convert(damaged, salvage=True)
    assert salvaged == [e for i, e in enumerate(EVENTS[name]) if i not in which]


@pytest.mark.parametrize(
    ("good", "flipped"),
    [(b'"name": "process_name", "ph": "M"', b'"ph"z'), (b'"name": "ac2g", "bp": "e"', b'"bp">')],
)
def test_a_key_taken_into_a_name_by_damage_is_not_repaired_as_quotes(good: bytes, flipped: bytes) -> None:
    """Found by the property above: ``"name": "process_name", "ph"z "M", "ts": ...`` (the ':' after
    "ph" flipped) once read as a name with unescaped quotes, ``process_name", "ph"z "M``, and salvage
    kept that event without its phase. It is damage: an error, and salvage drops that event alone."""
    t = TRACES["cuda_graph.json"]
    at = t.data.index(good)
    damaged = t.data[:at] + good.replace(flipped[:-1] + b":", flipped) + t.data[at + len(good) :]
    which = next(i for i, (a, b) in enumerate(t.spans) if a <= at < b)
    error = convert(damaged)
    assert isinstance(error, TraceconvError) and error.exit_code == 3
    assert convert(damaged, salvage=True) == [e for i, e in enumerate(EVENTS["cuda_graph.json"]) if i != which]


# -- dialects ----------------------------------------------------------------------------------
REPAIRED = [
    "quotes",
    "backslash",
    "control",
    "control_args",
    "bare_inf",
    "bare_nan",
    "bare_na",
    "trailing_comma_args",
    "control_tab",
    "utf8",
    "utf8_args",
    "trailing_comma_array",
]


def dialect_check(name: str, dialects: list[str], seed: int) -> None:
    t = TRACES[name]
    inj = MB.Injector(t, random.Random(seed))
    after = b""
    for dialect in dialects:
        after += MB.inject(inj, dialect)[1]
    converted = convert_with_args(inj.render(after))
    assert not isinstance(converted, TraceconvError), converted
    result, args = converted
    assert len(result) == len(EVENTS[name])
    for check in inj.args:
        assert check["key"] in json.loads(args[check["index"]] or "{}"), args[check["index"]]
    changed = {c["index"] for c in inj.names}
    assert [e for i, e in enumerate(result) if i not in changed] == [
        e for i, e in enumerate(EVENTS[name]) if i not in changed
    ]
    for check in inj.names:
        got = result[check["index"]][0]
        assert (
            got == check["equals"]
            if "equals" in check
            else (got.startswith(check["prefix"]) and got.endswith(check["suffix"]))
        ), (check, got)


@PROPERTY
@given(
    name=st.sampled_from(list(SMALL)[:2]),
    dialects=st.lists(st.sampled_from(REPAIRED), min_size=1, max_size=3, unique=True),
    seed=st.integers(0, 2**32),
)
def test_dialects_are_repaired_and_every_event_kept(name: str, dialects: list[str], seed: int) -> None:
    dialect_check(name, dialects, seed)


# -- round trip of valid inputs ---------------------------------------------------------------
def check_round_trip(path: Path, doc: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory(prefix="traceconv-rt-") as tmp:
        out = Path(tmp) / "rt.parquet"
        with no_hang():
            traceconv.convert(path, out)
        table = traceconv.read_table(out)
    events = doc["traceEvents"]
    assert table.num_rows == len(events)
    assert table["name"].to_pylist() == [e.get("name") for e in events]
    for i, (text, event) in enumerate(zip(table["args"].to_pylist(), events, strict=True)):
        if "args" not in event:
            assert text is None, (i, text)
        else:
            assert text is not None and json.loads(text) == event["args"], (i, text, event["args"])


VALID = real_files("pytorch", ("*.json", "*.json.gz"))


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.name[:50])
def test_real_traces_round_trip_every_event_and_argument(path: Path) -> None:
    check_round_trip(path, json.loads(MB.read_bytes(path)))


json_leaf = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
ARG_KEYS = [
    "External id",
    "correlation",
    "device",
    "stream",
    "grid",
    "block",
    "bytes",
    "Bytes",
    "warps per SM",
    "est. achieved occupancy %",
    "registers per thread",
]
arg_key = st.sampled_from(ARG_KEYS) | st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
edit = st.tuples(
    st.integers(0, 10**6),
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=30),
    st.dictionaries(arg_key, json_value, max_size=5),
)


@PROPERTY
@given(edits=st.lists(edit, min_size=1, max_size=6), ascii_only=st.booleans())
def test_any_names_and_arguments_round_trip(edits: list[tuple[int, str, dict[str, Any]]], ascii_only: bool) -> None:
    """Real events given arbitrary names and JSON arguments (ints past int64, unicode, nesting) survive."""
    doc = json.loads(TRACES["streams_memcpy.json"].data)
    events = doc["traceEvents"]
    for index, name, args in edits:
        event = events[index % len(events)]
        event["name"], event["args"] = name, args
    with tempfile.TemporaryDirectory(prefix="traceconv-rt-") as tmp:
        path = Path(tmp) / "edited.json"
        path.write_text(json.dumps(doc, ensure_ascii=ascii_only), encoding="utf-8")
        check_round_trip(path, doc)


_WRAPS = 2**32  # an int64 probe that an int32 key equals once truncated: it must not match


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(-5, 40), max_size=60),
    st.lists(st.integers(-5, 45) | st.sampled_from([_WRAPS, _WRAPS + 7, -_WRAPS + 3]), max_size=30),
    st.booleans(),
    st.sampled_from([np.int64, np.int32]),
)
def test_sorted_keys_find_the_first_equal_key(keys: list[int], probes: list[int], presorted: bool, dtype: type) -> None:
    """SortedKeys (pass 2's lookups) on keys in any order, and on keys already in order (kept
    without a sorted copy), held in 64 or 32 bits and probed with 64-bit keys: the index of
    the first equal key, or -1."""
    values = np.array(sorted(keys) if presorted else keys, dtype=dtype)
    found = SortedKeys(values).find(np.array(probes, dtype=np.int64))
    expected = [values.tolist().index(p) if p in values.tolist() else -1 for p in probes]
    assert found.tolist() == expected
    assert found.dtype == np.int64
