"""The summary's memory section: per device its peak and, for GPUs, what held it."""

from __future__ import annotations

import textwrap

from traceconv.analyses.results import MemoryPeak
from traceconv.render.table import Doc
from traceconv.units import ms, size


def memory_section(doc: Doc, memory: dict[str, MemoryPeak]) -> None:
    """One line of peaks, then a line per GPU of the allocations live at its peak (as many
    holders as fit the width in a terminal; all of the report's in Markdown)."""
    if not memory:
        return
    peaks = "; ".join(_peak(dev, m) for dev, m in memory.items())
    doc.heading("Memory peaks")
    if doc.markdown:
        doc.line(peaks)
    else:
        doc.lines[-1] += " " + peaks
        doc.lines[-1:] = _wrapped(doc, doc.lines[-1])
    for dev, m in memory.items():
        if _device(dev) != "host" and (m.holders or m.before_trace_bytes > 0):
            doc.line(_holders(f"{_device(dev)} at the peak: ", m, None if doc.markdown else doc.width))


def _wrapped(doc: Doc, text: str) -> list[str]:
    return textwrap.wrap(text, doc.width, subsequent_indent="  ")


def _device(dev: str) -> str:
    return "host" if dev.endswith("cpu") else f"GPU {dev}"


def _peak(dev: str, m: MemoryPeak) -> str:
    at = f" at {ms(m.peak_offset_ns)}" if m.peak_offset_ns is not None else ""
    text = f"{_device(dev)}: {size(m.allocated_peak_bytes)} allocated{at}"
    if m.reserved_at_peak_bytes:
        text += f", {size(m.reserved_at_peak_bytes)} reserved"
    return text


def _holders(head: str, m: MemoryPeak, width: int | None) -> str:
    """The holders, largest first, and what was allocated before the trace; cut to ``width``."""
    parts = [f"{h.name} {size(h.bytes)} x{h.count}" for h in m.holders]
    if m.before_trace_bytes > 0:
        parts.append(f"before the trace {size(m.before_trace_bytes)}")
    text = head + "; ".join(parts)
    if width is None or len(text) <= width:
        return text
    kept: list[str] = []
    for p in parts:
        if len(head + "; ".join([*kept, p, "..."])) > width:
            break
        kept.append(p)
    return head + "; ".join([*kept, "..."])
