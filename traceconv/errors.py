"""One exception hierarchy. Every message names the file, what is wrong, where, and the next step.

The CLI turns these into one line on stderr and the documented exit code of the class.
"""

from __future__ import annotations

from pathlib import Path


class TraceconvError(Exception):
    """Base class. ``exit_code`` is the process exit status the CLI uses for this class."""

    exit_code = 1

    def __init__(self, path: str | Path | None, problem: str, hint: str = "") -> None:
        self.path = str(path) if path is not None else None
        self.problem = problem
        self.hint = hint
        super().__init__(self.message)

    def __reduce__(self) -> tuple[type[TraceconvError], tuple[str | None, str, str]]:
        """Pickled as its parts (it crosses from a conversion process to the CLI's)."""
        return (type(self), (self.path, self.problem, self.hint))

    @property
    def message(self) -> str:
        head = f"{self.path}: {self.problem}" if self.path else self.problem
        return f"{head}; {self.hint}" if self.hint else head


class UsageError(TraceconvError):
    """The command line asks for something impossible (exit 2, as click does)."""

    exit_code = 2


class InputError(TraceconvError):
    """The input cannot be read: missing, unreadable, corrupt, truncated (exit 3)."""

    exit_code = 3


class UnsupportedFormatError(TraceconvError):
    """The input is readable but is not a format traceconv converts (exit 4)."""

    exit_code = 4


class SchemaVersionError(UnsupportedFormatError):
    """A Parquet file written by another schema version (exit 4)."""


class ToolMissingError(TraceconvError):
    """An external tool (``nsys``) is needed and was not found (exit 5)."""

    exit_code = 5


class PartialResultError(TraceconvError):
    """Output was written but is knowingly incomplete (``--salvage``) (exit 6)."""

    exit_code = 6


class ResourceError(TraceconvError):
    """The work needs more memory than it was given (exit 7)."""

    exit_code = 7


EXIT_CODES = {
    cls.__name__: cls.exit_code
    for cls in (
        TraceconvError,
        UsageError,
        InputError,
        UnsupportedFormatError,
        ToolMissingError,
        PartialResultError,
        ResourceError,
    )
}
