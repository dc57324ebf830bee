"""``traceconv sql``: DuckDB's SQL over the unified events of any inputs."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from traceconv.cli import main
from traceconv.cli.analyse import opened
from traceconv.cli.errors import handle_errors
from traceconv.cli.width import terminal_width
from traceconv.errors import InputError, UsageError


@main.command()
@click.argument("query")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@click.option(
    "--limit",
    type=click.IntRange(min=0),
    default=40,
    show_default=True,
    help="Rows a table shows (all are counted); 0 shows all. CSV and JSON write every row.",
)
@handle_errors
def sql(query: str, inputs: tuple[Path, ...], fmt: str, limit: int) -> None:
    """Query the unified events of INPUTS with DuckDB's SQL: they are the view `events`.

    INPUTS are traceconv Parquet files, dataset directories, or traces and reports (converted
    on the fly, into temporary files that are removed after). The columns are the unified
    schema's (docs/schema.md); times in nanoseconds. QUERY may be `@FILE` to read it from a file, or
    `-` to read it from stdin. Memory is bounded (DuckDB spills to a temporary folder; the
    budget starts at 96MB and grows where a query needs it; TRACECONV_MEMORY fixes it).

    Example:

        traceconv sql "SELECT name, count(*) n, sum(dur_ns) ns FROM events WHERE kind = 'kernel'
        GROUP BY name ORDER BY ns DESC LIMIT 10" trace.parquet

        traceconv sql @copies.sql runs/ --format csv > copies.csv
    """
    from traceconv.analyses.source import run_query
    from traceconv.render import rows

    text = _query_text(query)
    with opened(list(inputs), one=False) as source:
        batches = run_query(source, text)
        if fmt == "table":
            out = rows.table_text(batches, limit, terminal_width(200))
        else:
            out = rows.csv_text(batches) if fmt == "csv" else rows.json_text(batches)
        for chunk in out:
            sys.stdout.write(chunk)
        sys.stdout.flush()


def _query_text(query: str) -> str:
    if query == "-":
        text = sys.stdin.read()
    elif query.startswith("@"):
        path = Path(query[1:])
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            problem = f"cannot be read ({exc.strerror or exc})"
            raise InputError(path, problem, "give the query's file, or the query itself") from exc
    else:
        text = query
    if not text.strip():
        raise UsageError(None, "the query is empty", 'give a query, e.g. "SELECT count(*) FROM events"')
    return text
