"""The command line: thin click commands over the public API. Only this package prints.

``main`` is the group; each command module registers itself on it (``convert``: ingest and
nsys; ``analyse``: kernels, summary, diff; ``query``: sql; ``report``: report). A command parses
its arguments, makes one call into the library and prints what it returns; the library's errors
become one line on stderr (:func:`errors.handle_errors`).
"""

from __future__ import annotations

import signal

import click

from traceconv import __version__, process


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="traceconv")
@click.option("--debug", is_flag=True, help="Show the full traceback on errors.")
def main(debug: bool) -> None:
    """Convert GPU profiles (PyTorch profiler, Nsight Systems) to one Parquet schema and analyse them."""
    # SIGTERM (kill, timeout, a job scheduler) unwinds like Ctrl-C: temporary files and
    # half-written outputs are removed on the way out; exit status 143 as the shell reports it.
    signal.signal(signal.SIGTERM, _terminated)
    process.tune()


def entry() -> None:
    """The ``traceconv`` program: :func:`main`, ending the process at once when it is done
    (:func:`process.exit_now`)."""
    try:
        main()
    except SystemExit as done:
        process.exit_now(done.code)
        raise


def _terminated(signum: int, frame: object) -> None:
    signal.signal(signum, signal.SIG_IGN)  # once: a second SIGTERM must not cut the cleanup short
    raise SystemExit(128 + signum)


from traceconv.cli import analyse, convert, ops, perfetto, query, ranks, report, whatif  # noqa: E402, F401

__all__ = ["entry", "main"]
