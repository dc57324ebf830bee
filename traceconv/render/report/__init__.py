"""``traceconv report``: one input's figures, or two inputs' diff, as one self-contained HTML file.

:func:`one_page` and :func:`diff_page` measure (the summary, the timeline's breakdown and series,
the kernels' histograms, the diff) and lay out the page; :func:`write` writes it under a temporary
name and renames it. Where a report may be written is checked before any of this is imported
(:mod:`traceconv.render.report_output`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from traceconv.analyses import diff as D
from traceconv.analyses import summary as SM
from traceconv.analyses import timeline as T
from traceconv.analyses.source import Source
from traceconv.analyses.steps import STEP_PATTERN
from traceconv.analyses.summary.scopes import Scope
from traceconv.analyses.thresholds import DEFAULTS, Thresholds
from traceconv.errors import TraceconvError
from traceconv.render.report.assets import vega_bundle
from traceconv.render.report.page import Page
from traceconv.render.report.sections import RunFigures, diff_section, run_sections

DEFAULT_TOP = 15
Step = Callable[[int, int], None]  # progress: parts done, parts in all


@dataclass(frozen=True)
class Options:
    top: int = DEFAULT_TOP
    thresholds: Thresholds = DEFAULTS
    step_pattern: str = STEP_PATTERN


@dataclass(frozen=True)
class Written:
    path: Path
    bytes: int
    charts: int


def figures(source: Source, name: str, opts: Options) -> RunFigures:
    """Everything the report shows of one input, aggregated (see :mod:`traceconv.analyses.timeline`)."""
    s = SM.summarize(source, opts.thresholds, opts.top, opts.step_pattern)
    scope = s.focus.scope
    window = s.window.scope
    return RunFigures(
        name=name,
        summary=SM.report(s, opts.top),
        scope=scope.name,
        breakdown=T.breakdown(source, scope.gpu, scope.steps),
        steps=T.step_breakdown(source, s.lived.start_ns, s.lived.end_ns) if s.lived and scope.name == "steps" else [],
        timeline=T.series(source, _span(window)),
        histograms=T.histograms(source),
    )


def _span(window: Scope) -> tuple[int, int]:
    """Where the charts over time look: from the GPUs' first work to their last (the profiled window
    when there is none), not seconds of set-up around 40 ms of work."""
    spans = list(window.gpu.devices.values())
    if not spans:
        return int(window.start_ns[0]), int(window.end_ns[0])
    return min(int(s[0][0]) for s in spans), max(int(s[1][-1]) for s in spans)


def one_page(source: Source, name: str, opts: Options = Options(), progress: Step | None = None) -> Page:
    step = progress or (lambda done, total: None)
    step(0, 1)
    run = figures(source, name, opts)
    page = Page(f"traceconv report: {name}", f"{run.summary.source} · {_scope_line(run)}")
    run_sections(page, run)
    step(1, 1)
    return page


def diff_page(
    before: Source, after: Source, names: tuple[str, str], opts: Options = Options(), progress: Step | None = None
) -> Page:
    """The diff first, then each run's own sections."""
    step = progress or (lambda done, total: None)
    step(0, 3)
    d = D.report(D.diff(before, after, opts.thresholds, opts.step_pattern), opts.top)
    step(1, 3)
    runs = []
    for k, (source, name) in enumerate(zip((before, after), names, strict=True)):
        runs.append(figures(source, name, opts))
        step(2 + k, 3)
    page = Page(f"traceconv report: {names[0]} → {names[1]}", f"compared per {_unit(d.scope)}")
    diff_section(page, d, *names)
    for label, run in zip(("Before:", "After:"), runs, strict=True):
        run_sections(page, run, f"{label} {run.name}")
    return page


def _unit(scope: str) -> str:
    return "step (warm-up left out)" if scope == "steps" else "profiled window (the runs do not both mark steps)"


def _scope_line(run: RunFigures) -> str:
    st = run.summary.steps
    if run.scope == "steps" and st is not None:
        return f"{st.count} steps, median {st.median_ns / 1e6:,.2f} ms; breakdown per step"
    return f"profiled window {run.summary.window_ns / 1e6:,.2f} ms (no steps marked)"


def write(page: Page, out: Path) -> Written:
    """The page with its scripts inlined, written under a temporary name beside ``out`` and renamed."""
    text = page.render(vega_bundle()).encode("utf-8")
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(text)
        os.replace(tmp, out)
    except OSError as exc:
        raise TraceconvError(
            out, f"cannot be written ({exc.strerror or exc})", "check the folder and free space"
        ) from exc
    finally:
        tmp.unlink(missing_ok=True)
    return Written(out, len(text), len(page.charts))


__all__ = ["Options", "Written", "diff_page", "figures", "one_page", "write"]
