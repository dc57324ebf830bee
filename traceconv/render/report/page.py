"""The report's HTML: one file with every script and style inline, which fetches nothing.

Charts are Vega-Lite specifications in one JSON block, drawn as SVG by the inlined Vega bundle;
when all are drawn the page counts the marks of each and writes the outcome to ``document.title``
(``report ready: N/N charts``) and to ``window.traceconvReport`` (what the browser tests read).
Tables sort on a click on their header (numbers by their exact value, kept in ``data-v``).
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from traceconv.render.report.charts import Spec
from traceconv.render.report_output import GENERATOR

STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#1f2d3d;color:#fff;padding:14px 24px}header h1{margin:0;font-size:20px}
header p{margin:4px 0 0;color:#c9d3dd}main{padding:8px 24px 40px;max-width:1400px}
section{background:#fff;border:1px solid #e3e3e3;border-radius:6px;margin:16px 0;padding:12px 16px;overflow-x:auto}
h2{font-size:17px;margin:4px 0 10px}h3{font-size:15px;margin:14px 0 6px}
.chart{width:100%;min-height:60px;margin:6px 0 14px}.empty{color:#777;font-style:italic}
table{border-collapse:collapse;font-size:13px;margin:6px 0 12px}
th,td{border-bottom:1px solid #eee;padding:3px 10px;text-align:right;white-space:nowrap}
th{background:#f3f5f7;cursor:pointer;user-select:none;position:sticky;top:0}
th.sorted-asc::after{content:" ▲"}th.sorted-desc::after{content:" ▼"}
td.text,th.text{text-align:left;white-space:normal;min-width:70px;max-width:640px;word-break:break-word}
.sev-high{color:#b00020;font-weight:600}.sev-medium{color:#b35c00;font-weight:600}.sev-low{color:#555}
.kpis{display:flex;flex-wrap:wrap;gap:10px}.kpi{border:1px solid #e3e3e3;border-radius:6px;padding:6px 12px}
.kpi b{display:block;font-size:18px}.notes li{color:#555}nav a{margin-right:12px;color:#1f5fa8}
"""

SCRIPT = """
(function () {
  function sortable(table) {
    table.querySelectorAll('th').forEach(function (th, col) {
      th.addEventListener('click', function () {
        var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
        var asc = !th.classList.contains('sorted-asc');
        table.querySelectorAll('th').forEach(function (h) { h.classList.remove('sorted-asc', 'sorted-desc'); });
        th.classList.add(asc ? 'sorted-asc' : 'sorted-desc');
        rows.sort(function (a, b) {
          var x = a.cells[col], y = b.cells[col];
          var u = x.dataset.v, v = y.dataset.v, r;
          if (u !== undefined && v !== undefined) { r = parseFloat(u) - parseFloat(v); }
          else { r = x.textContent.localeCompare(y.textContent); }
          return asc ? r : -r;
        });
        rows.forEach(function (row) { body.appendChild(row); });
      });
    });
  }
  document.querySelectorAll('table.sortable').forEach(sortable);
  var specs = JSON.parse(document.getElementById('report-charts').textContent);
  var ids = Object.keys(specs);
  var status = {charts: ids.length, drawn: 0, marks: {}, errors: []};
  window.traceconvReport = status;
  Promise.all(ids.map(function (id) {
    return vegaEmbed('#' + id, specs[id], {actions: false, renderer: 'svg'}).then(function () {
      var marks = document.querySelectorAll('#' + id + ' svg .mark-line path, #' + id + ' svg .mark-rect path, #'
        + id + ' svg .mark-symbol path').length;
      status.marks[id] = marks;
      if (marks > 0) { status.drawn += 1; }
    });
  })).then(function () {
    status.done = true;
    document.title = 'report ready: ' + status.drawn + '/' + status.charts + ' charts';
  }).catch(function (e) {
    status.done = true;
    status.errors.push(String(e));
    document.title = 'report failed: ' + e;
    console.error(e);
  });
})();
"""


@dataclass
class Page:
    """The report being written: sections of HTML, and the charts they hold by id."""

    title: str
    subtitle: str
    sections: list[str] = field(default_factory=list)
    charts: dict[str, Spec] = field(default_factory=dict)
    nav: list[tuple[str, str]] = field(default_factory=list)

    def chart(self, spec: Spec | None, missing: str) -> str:
        """A chart's place (its spec kept for the script), or the sentence saying why there is none."""
        if spec is None:
            return f'<p class="empty">{html.escape(missing)}</p>'
        key = f"chart{len(self.charts)}"
        self.charts[key] = spec
        return f'<div class="chart" id="{key}"></div>'

    def section(self, anchor: str, title: str, *parts: str) -> None:
        self.nav.append((anchor, title))
        self.sections.append(f'<section id="{anchor}"><h2>{html.escape(title)}</h2>{"".join(parts)}</section>')

    def render(self, vega_js: str) -> str:
        charts = json.dumps(self.charts, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
        nav = "".join(f'<a href="#{a}">{html.escape(t)}</a>' for a, t in self.nav)
        return (
            '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="generator" content="{GENERATOR}">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{html.escape(self.title)}</title><style>{STYLE}</style></head><body>"
            f"<header><h1>{html.escape(self.title)}</h1><p>{html.escape(self.subtitle)}</p></header>"
            f"<main><nav>{nav}</nav>{''.join(self.sections)}</main>"
            f'<script type="application/json" id="report-charts">{charts}</script>'
            f"<script>{vega_js}</script><script>{SCRIPT}</script></body></html>"
        )


Cell = Callable[[Any], str]


@dataclass(frozen=True)
class Column:
    """A table column: its header, the row's key, how a value is shown (None: as text)."""

    title: str
    key: str
    show: Cell | None = None


def table(columns: Sequence[Column], rows: Sequence[dict[str, Any]], empty: str = "none") -> str:
    """A sortable table; numbers keep their exact value for sorting."""
    if not rows:
        return f'<p class="empty">{html.escape(empty)}</p>'
    head = "".join(f'<th class="{"text" if c.show is None else "num"}">{html.escape(c.title)}</th>' for c in columns)
    body = []
    for row in rows:
        cells = []
        for c in columns:
            v = row.get(c.key)
            if c.show is None or v is None or isinstance(v, str):
                text = "-" if v is None else str(v)
                klass = "text" if c.show is None else "num"
                cells.append(f'<td class="{klass}">{html.escape(text)}</td>')
            else:
                cells.append(f'<td data-v="{float(v)!r}">{html.escape(c.show(v))}</td>')
        body.append(f"<tr>{''.join(cells)}</tr>")
    return f'<table class="sortable"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def kpis(items: Sequence[tuple[str, str]]) -> str:
    return (
        '<div class="kpis">'
        + "".join(f'<div class="kpi">{html.escape(k)}<b>{html.escape(v)}</b></div>' for k, v in items)
        + "</div>"
    )


def notes(lines: Sequence[str]) -> str:
    if not lines:
        return ""
    return '<h3>Notes</h3><ul class="notes">' + "".join(f"<li>{html.escape(n)}</li>" for n in lines) + "</ul>"


def ms(v: Any) -> str:
    return f"{float(v) / 1e6:,.3f}"


def us(v: Any) -> str:
    return f"{float(v) / 1e3:,.1f}"


def count(v: Any) -> str:
    return f"{v:,}" if isinstance(v, int) else f"{float(v):,.2f}"


def pct(v: Any) -> str:
    return f"{float(v):.1f}"


def mib(v: Any) -> str:
    return f"{float(v) / 2**20:,.1f}"


def mb(v: Any) -> str:
    return f"{float(v) / 1e6:,.2f}"


def signed_ms(v: Any) -> str:
    return ("+" if float(v) > 0 else "") + ms(v)
