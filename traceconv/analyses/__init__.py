"""Analyses: pure functions from a unified table (or DataFrame) to a new DataFrame.

Nothing here prints or mutates its input; the CLI formats what these return.
"""

from traceconv.analyses.common import load
from traceconv.analyses.kernels import per_launch
from traceconv.analyses.kernels import summary as kernel_summary

# ``summary`` is the module of ``traceconv summary`` (traceconv.analyses.summary), not kernels.summary.
__all__ = ["kernel_summary", "load", "per_launch"]
