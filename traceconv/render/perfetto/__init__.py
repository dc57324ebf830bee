"""The unified events as a timeline: a Perfetto protobuf trace, or Chrome's JSON trace format.

:func:`export` writes any inputs (traces, Nsight Systems reports and exports, traceconv
Parquet) into one file, each input a set of process groups: ``encoder`` is the protobuf wire
format, ``tracks`` the track tree, ``nesting`` the lanes that keep every track properly
nested, ``scan`` and ``records`` the rows on their tracks, ``writer`` the passes, and
``proto`` and ``chrome`` the two formats.
"""

from __future__ import annotations

from traceconv.render.perfetto.writer import FORMATS, ExportResult, export

__all__ = ["FORMATS", "ExportResult", "export"]
