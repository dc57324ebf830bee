"""Nsight Systems: SQLite exports (:class:`NsysReader`) and reports (:class:`NsysReportReader`).

``sql`` reads tables (ADBC, or SQLite's CSV output); ``meta``, ``enums``, ``privacy`` and
``diagnostics`` read the export's descriptions of itself; ``parts`` and ``tables`` turn each
source table into unified columns; ``nvtx`` reads NVTX events; ``links`` joins GPU work to
its launching call and calls to their NVTX ranges; ``reader`` puts them together; ``report``
exports a ``.nsys-rep`` with ``nsys`` first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from traceconv.readers.nsys.reader import NsysReader
    from traceconv.readers.nsys.report import NsysReportReader

__all__ = ["NsysReader", "NsysReportReader"]


def __getattr__(name: str) -> Any:
    if name == "NsysReader":
        from traceconv.readers.nsys.reader import NsysReader

        return NsysReader
    if name == "NsysReportReader":
        from traceconv.readers.nsys.report import NsysReportReader

        return NsysReportReader
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
