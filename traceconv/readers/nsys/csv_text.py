"""The SQL reads' last resort: rows formatted as text by SQLite, parsed by Arrow's CSV reader.

Where ADBC is missing or types a column otherwise than the column declares, SQLite formats each
chunk of rows as one text in C and Arrow parses it: about 2x slower than ADBC, several times
faster than building a Python tuple per row (:mod:`traceconv.readers.nsys.sql` decides when).
"""

from __future__ import annotations

from typing import IO, Any, cast

import pyarrow as pa
import pyarrow.csv as pacsv

from traceconv.readers.arrow_util import utf8


class Line:
    """One row as a line of text, and back.

    Integers only: ``json_array(0, a, b, 0)`` (SQLite's JSON writer formats integers fastest),
    read as unquoted CSV without the two sentinel fields. With text or reals: ``printf`` of
    ``quote(text)`` and ``%!.17g`` (exact doubles), read as CSV quoted with ``'``.
    """

    def __init__(self, names: list[str], types: dict[str, pa.DataType]) -> None:
        self.names, self.types = names, types
        self.replaced = 0  # texts with invalid UTF-8, kept with U+FFFD in its place
        self.integers = all(t == pa.int64() for t in types.values())
        cols = ", ".join(_field(c, types[c]) for c in names)
        if self.integers:
            self.sql = f"json_array(0, {cols}, 0)"
        else:
            # %s of NULL: an empty field. A last field, always 0: Arrow refuses a column whose every
            # value is an empty last field of its line.
            self.sql = f"printf('{','.join(['%s'] * len(names))},0', {cols})"

    def parse(self, text: bytes) -> pa.Table:
        if self.integers:
            return pacsv.read_csv(
                _source(text),
                read_options=pacsv.ReadOptions(column_names=["[", *self.names, "]"], block_size=1 << 22),
                parse_options=pacsv.ParseOptions(quote_char=False),
                convert_options=pacsv.ConvertOptions(
                    include_columns=self.names, column_types=self.types, null_values=["null"]
                ),
            )
        has_text = any(t == pa.string() for t in self.types.values())
        # Text as bytes, then checked: an application's NVTX names are not always UTF-8, and
        # one such name must not stop the conversion of the whole report.
        raw_types = {c: pa.binary() if t == pa.string() else t for c, t in self.types.items()}
        got = pacsv.read_csv(
            _source(text),
            read_options=pacsv.ReadOptions(
                column_names=[*self.names, "]"], block_size=len(text) + 1 if has_text else 1 << 22
            ),
            parse_options=pacsv.ParseOptions(quote_char="'", double_quote=True, newlines_in_values=has_text),
            convert_options=pacsv.ConvertOptions(
                include_columns=self.names,
                column_types=raw_types,
                null_values=["", "NULL"],
                strings_can_be_null=True,
                quoted_strings_can_be_null=False,
            ),
        )
        cols = []
        for name in self.names:
            col = got[name]
            if self.types[name] == pa.string():
                col, bad = utf8(col)
                self.replaced += bad
            cols.append(col)
        return pa.table(cols, names=self.names)


def _source(text: bytes) -> IO[Any]:
    """The CSV text as Arrow's in-memory file (no copy); the stubs know only Python files."""
    return cast(IO[Any], pa.BufferReader(text))


def _field(name: str, typ: pa.DataType) -> str:
    col = f"[{name}]"
    if typ == pa.string():
        return f"quote({col})"  # 'it''s' or NULL: parsed with ' as the quote character
    if typ == pa.float64():
        return f"iif({col} IS NULL, NULL, printf('%!.17g', {col}))"
    return col
