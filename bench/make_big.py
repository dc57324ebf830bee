"""Make a larger real trace from a real one: its events repeated N times, one copy after another.

    python bench/make_big.py bench/data/big_train.json bench/data/big_train_x4.json --copies 4

Copy k has every ``ts`` moved by k times the trace's span (so the copies follow each other
in time without overlapping) and every id that links events (``correlation``,
``External id``, flow ``id``, ``Ev Idx``, ``Python id``, ``Python parent id``) moved by k
times (largest id + 1), so that ids stay unique and links stay inside their copy. The
metadata around ``traceEvents`` is kept once, byte for byte.

Works on the text, a block of lines at a time, without parsing the events: memory stays
flat whatever the size, and timestamps stay exact (only their integer microseconds
change). It needs each ``"key": value`` pair on one line, as Kineto writes them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path

BLOCK = 8 << 20
TAIL = 1 << 20
TS = re.compile(rb'"ts": ?(-?\d+)')
DUR = re.compile(rb'"dur": ?(\d+)')
IDS = re.compile(rb'("(?:correlation|External id|id|Ev Idx|Python id|Python parent id)": ?)(\d+)')
EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')


def events_span(path: Path) -> tuple[int, int]:
    """(start, end) byte offsets of the text between ``"traceEvents": [`` and its ``]``."""
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = b""
        while (found := EVENTS_KEY.search(head)) is None:
            block = fh.read(BLOCK)
            if not block:
                raise SystemExit(f"{path}: no traceEvents array")
            head += block
        fh.seek(max(0, size - TAIL))
        tail = fh.read()
    tail_at = max(0, size - TAIL)
    # The array ends at the last "]" after which only the rest of the top-level object follows.
    pos = len(tail)
    while (pos := tail.rfind(b"]", 0, pos)) >= 0:
        after = tail[pos + 1 :].strip()
        if after == b"}" or (after.startswith(b",") and _is_object(b"{" + after[1:])):
            return found.end(), tail_at + pos
    raise SystemExit(f"{path}: cannot find the end of traceEvents in its last {TAIL} bytes")


def _is_object(text: bytes) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def blocks(path: Path, start: int, end: int) -> Iterator[bytes]:
    """The bytes in [start, end), cut after a newline so that no ``"key": value`` is split."""
    with open(path, "rb") as fh:
        fh.seek(start)
        left = end - start
        carry = b""
        while left > 0:
            block = carry + fh.read(min(BLOCK, left))
            left = end - fh.tell()
            cut = block.rfind(b"\n") + 1 if left > 0 else len(block)
            if cut == 0:
                carry = block
                continue
            yield block[:cut]
            carry = block[cut:]
        if carry:
            yield carry


def measure(path: Path, start: int, end: int) -> tuple[int, int]:
    """(ts shift in us, id shift): the span covered by the events, the largest id + 1."""
    lo, hi, longest, top = None, 0, 0, 0
    for block in blocks(path, start, end):
        stamps = [int(m) for m in TS.findall(block)]
        positive = [t for t in stamps if t > 0]  # metadata events may say ts 0
        if positive:
            lo = min(positive) if lo is None else min(lo, *positive)
            hi = max(hi, *positive)
        longest = max([longest, *(int(m) for m in DUR.findall(block))])
        top = max([top, *(int(m[1]) for m in IDS.findall(block))])
    return (hi - (lo or 0)) + longest + 1, top + 1


def shifter(ts_by: int, id_by: int) -> Callable[[bytes], bytes]:
    def ts(m: re.Match[bytes]) -> bytes:
        return b'"ts": ' + str(int(m[1]) + ts_by).encode()

    def ident(m: re.Match[bytes]) -> bytes:
        return m[1] + str(int(m[2]) + id_by).encode()

    return lambda block: IDS.sub(ident, TS.sub(ts, block))


def make(src: Path, out: Path, copies: int, span_of: tuple[Path, ...] = ()) -> None:
    """``span_of``: other traces whose span, when longer, moves the copies instead (ranks of one run
    repeated in step with each other, so that their collectives still line up)."""
    start, end = events_span(src)
    ts_by, id_by = measure(src, start, end)
    ts_by = max([ts_by, *(measure(p, *events_span(p))[0] for p in span_of)])
    tmp = out.with_name(out.name + ".part")
    with open(src, "rb") as fin, open(tmp, "wb") as fout:
        fout.write(fin.read(start))
        for k in range(copies):
            if k:
                fout.write(b",")
            shift = shifter(k * ts_by, k * id_by)
            for block in blocks(src, start, end):
                fout.write(shift(block) if k else block)
        fin.seek(end)
        while chunk := fin.read(BLOCK):
            fout.write(chunk)
    os.replace(tmp, out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("src", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--copies", type=int, default=4)
    parser.add_argument(
        "--span-of", type=Path, action="append", default=[], help="move copies by this trace's span when longer"
    )
    args = parser.parse_args()
    make(args.src, args.out, args.copies, tuple(args.span_of))


if __name__ == "__main__":
    main()
