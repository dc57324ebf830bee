"""Analyses: pure functions from a unified table (or DataFrame) to a new DataFrame.

Nothing here prints or mutates its input; the CLI formats what these return.
"""

from traceconv.analyses.common import load
from traceconv.analyses.kernels import per_launch, summary

__all__ = ["load", "per_launch", "summary"]
