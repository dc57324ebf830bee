"""The library's errors as one line on stderr and the error class's exit code."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from traceconv.errors import TraceconvError

F = TypeVar("F", bound=Callable[..., Any])


def fail(exc: TraceconvError) -> None:
    click.echo(f"traceconv: error: {exc.message}", err=True)
    sys.exit(exc.exit_code)


def note(text: str) -> None:
    click.echo(f"traceconv: note: {text}", err=True)


def handle_errors(func: F) -> F:
    """Turn the library's errors into one line on stderr and the class's exit code."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        debug = click.get_current_context().find_root().params.get("debug", False)
        try:
            return func(*args, **kwargs)
        except TraceconvError as exc:
            if debug:
                raise
            fail(exc)
        except KeyboardInterrupt:
            click.echo("traceconv: interrupted; no output was left half-written", err=True)
            sys.exit(130)
        except MemoryError:
            click.echo("traceconv: error: out of memory; please report this with the input's size", err=True)
            sys.exit(1)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as exc:  # a bug of ours: still one line, and the way to the traceback
            if debug:
                raise
            click.echo(
                f"traceconv: internal error: {type(exc).__name__}: {exc}; rerun with --debug and report the traceback",
                err=True,
            )
            sys.exit(1)

    return wrapper  # type: ignore[return-value]
