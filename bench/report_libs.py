"""Which plotting library for `traceconv report`: the same six charts of one trace's aggregated
data drawn with Plotly, Vega-Lite (vl-convert's bundle) and Bokeh, each page self-contained
(the library's JavaScript from its Python wheel, inlined). Prints file size and the time from
navigation until every chart is drawn in headless Chromium (median of --runs).

    .venv-libs/bin/python bench/report_libs.py big_train.parquet --runs 5

Needs plotly, bokeh and vl-convert-python in the running Python, and chromium.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from browser import Browser, find_browser

BUCKETS = 400


def data(parquet: Path) -> dict[str, Any]:
    """What the report shows, aggregated in SQL: per-bucket series, top kernels, a histogram."""
    con = duckdb.connect()
    con.execute(f"CREATE VIEW events AS SELECT * FROM read_parquet('{parquet}')")
    lo, hi = con.execute("SELECT min(start_ns), max(end_ns) FROM events WHERE kind = 'kernel'").fetchone()
    width = (hi - lo) / BUCKETS
    util = con.execute(
        f"SELECT device, floor((start_ns - {lo}) / {width}) AS b, sum(dur_ns) / {width} * 100 AS pct FROM events "
        "WHERE kind = 'kernel' GROUP BY ALL ORDER BY 1, 2"
    ).fetchall()
    copies = con.execute(
        f"SELECT copy_kind, floor((start_ns - {lo}) / {width}) AS b, sum(bytes) / 1e6 FROM events "
        "WHERE kind = 'memcpy' GROUP BY ALL ORDER BY 1, 2"
    ).fetchall()
    top = con.execute(
        "SELECT name[:60], sum(dur_ns) / 1e6, sum(queue_ns) / 1e6 FROM events WHERE kind = 'kernel' "
        "GROUP BY 1 ORDER BY 2 DESC LIMIT 20"
    ).fetchall()
    hist = con.execute(
        "SELECT floor(log10(greatest(dur_ns, 1)) * 10) / 10 AS b, count(*) FROM events WHERE kind = 'kernel' "
        "GROUP BY 1 ORDER BY 1"
    ).fetchall()
    qhist = con.execute(
        "SELECT floor(log10(greatest(queue_ns, 1)) * 10) / 10 AS b, count(*) FROM events "
        "WHERE kind = 'kernel' AND queue_ns IS NOT NULL GROUP BY 1 ORDER BY 1"
    ).fetchall()
    breakdown = [("GPU 0", "compute", 60.0), ("GPU 0", "communication", 5.0), ("GPU 0", "copies", 3.0)]
    breakdown += [("GPU 0", "idle", 32.0)]
    return {
        "util": [(f"GPU {d}", b * width / 1e6, p) for d, b, p in util],
        "copies": [(str(k), b * width / 1e6, mb) for k, b, mb in copies],
        "top": top,
        "hist": hist,
        "qhist": qhist,
        "breakdown": breakdown,
    }


def plotly_page(d: dict[str, Any]) -> str:
    import plotly.offline

    def series(rows: list[Any], kind: str) -> list[dict[str, Any]]:
        keys = sorted({r[0] for r in rows})
        return [
            {"type": kind, "name": k, "x": [r[1] for r in rows if r[0] == k], "y": [r[2] for r in rows if r[0] == k]}
            for k in keys
        ]

    figs = [
        {"data": series(d["util"], "scatter"), "layout": {"title": {"text": "GPU busy %"}, "yaxis": {"title": "%"}}},
        {"data": series(d["copies"], "bar"), "layout": {"barmode": "stack", "yaxis": {"title": "MB"}}},
        {
            "data": [
                {
                    "type": "bar",
                    "orientation": "h",
                    "name": n,
                    "y": [r[0] for r in d["top"]],
                    "x": [r[i] for r in d["top"]],
                }
                for i, n in ((1, "exec"), (2, "queue"))
            ],
            "layout": {"height": 600, "xaxis": {"title": "ms"}},
        },
        {
            "data": [{"type": "bar", "x": [10 ** r[0] for r in d["hist"]], "y": [r[1] for r in d["hist"]]}],
            "layout": {"xaxis": {"type": "log", "title": "ns"}},
        },
        {
            "data": [{"type": "bar", "x": [10 ** r[0] for r in d["qhist"]], "y": [r[1] for r in d["qhist"]]}],
            "layout": {"xaxis": {"type": "log", "title": "ns"}},
        },
        {
            "data": [{"type": "bar", "orientation": "h", "name": c, "y": [g], "x": [v]} for g, c, v in d["breakdown"]],
            "layout": {"barmode": "stack"},
        },
    ]
    divs = "".join(f'<div id="c{i}"></div>' for i in range(len(figs)))
    calls = ",".join(
        f"Plotly.newPlot('c{i}', {json.dumps(f['data'])}, {json.dumps(f['layout'])})" for i, f in enumerate(figs)
    )
    return (
        f"<html><head><meta charset='utf-8'><script>{plotly.offline.get_plotlyjs()}</script></head><body>{divs}"
        f"<script>Promise.all([{calls}]).then(() => {{ window.drawn = performance.now(); }})</script></body></html>"
    )


def vega_page(d: dict[str, Any]) -> str:
    import vl_convert

    def rows(items: list[Any], *names: str) -> list[dict[str, Any]]:
        return [dict(zip(names, r, strict=True)) for r in items]

    tip = {"tooltip": True}
    specs = [
        {
            "data": {"values": rows(d["util"], "dev", "ms", "pct")},
            "mark": {"type": "line", **tip},
            "encoding": {
                "x": {"field": "ms", "type": "quantitative"},
                "y": {"field": "pct", "type": "quantitative"},
                "color": {"field": "dev"},
            },
        },
        {
            "data": {"values": rows(d["copies"], "dir", "ms", "mb")},
            "mark": {"type": "bar", **tip},
            "encoding": {
                "x": {"field": "ms", "type": "quantitative"},
                "y": {"field": "mb", "type": "quantitative"},
                "color": {"field": "dir"},
            },
        },
        {
            "data": {"values": rows(d["top"], "name", "exec", "queue")},
            "transform": [{"fold": ["exec", "queue"]}],
            "mark": {"type": "bar", **tip},
            "encoding": {
                "y": {"field": "name", "sort": "-x"},
                "x": {"field": "value", "type": "quantitative"},
                "color": {"field": "key"},
            },
        },
        {
            "data": {"values": rows(d["hist"], "b", "n")},
            "mark": {"type": "bar", **tip},
            "encoding": {"x": {"field": "b", "type": "quantitative"}, "y": {"field": "n", "type": "quantitative"}},
        },
        {
            "data": {"values": rows(d["qhist"], "b", "n")},
            "mark": {"type": "bar", **tip},
            "encoding": {"x": {"field": "b", "type": "quantitative"}, "y": {"field": "n", "type": "quantitative"}},
        },
        {
            "data": {"values": rows(d["breakdown"], "dev", "part", "pct")},
            "mark": {"type": "bar", **tip},
            "encoding": {
                "y": {"field": "dev"},
                "x": {"field": "pct", "type": "quantitative"},
                "color": {"field": "part"},
            },
        },
    ]
    divs = "".join(f'<div id="c{i}"></div>' for i in range(len(specs)))
    calls = ",".join(
        f"vegaEmbed('#c{i}', {json.dumps({'width': 700, **s})}, {{actions: false}})" for i, s in enumerate(specs)
    )
    return (
        f"<html><head><meta charset='utf-8'><script>{vl_convert.javascript_bundle()}</script></head><body>{divs}"
        f"<script>Promise.all([{calls}]).then(() => {{ window.drawn = performance.now(); }})</script></body></html>"
    )


def bokeh_page(d: dict[str, Any]) -> str:
    from bokeh.embed import json_item
    from bokeh.models import HoverTool
    from bokeh.plotting import figure
    from bokeh.resources import INLINE

    figs = []
    for key in ("util", "copies"):
        f = figure(width=700, height=300)
        for name in sorted({r[0] for r in d[key]}):
            part = [r for r in d[key] if r[0] == name]
            xs, ys = [r[1] for r in part], [r[2] for r in part]
            f.line(xs, ys, legend_label=name) if key == "util" else f.vbar(x=xs, top=ys, width=1, legend_label=name)
        f.add_tools(HoverTool())
        figs.append(f)
    names = [r[0] for r in d["top"]]
    f = figure(y_range=names[::-1], width=700, height=600)
    f.hbar(y=names, right=[r[1] for r in d["top"]], height=0.4)
    f.add_tools(HoverTool())
    figs.append(f)
    for key in ("hist", "qhist"):
        f = figure(width=700, height=300)
        f.vbar(x=[r[0] for r in d[key]], top=[r[1] for r in d[key]], width=0.09)
        f.add_tools(HoverTool())
        figs.append(f)
    f = figure(y_range=["GPU 0"], width=700, height=200)
    f.hbar_stack(
        ["a", "b", "c", "e"],
        y="y",
        height=0.5,
        source={"y": ["GPU 0"], "a": [60], "b": [5], "c": [3], "e": [32]},
        color=["#4c78a8", "#f58518", "#54a24b", "#bab0ac"],
    )
    figs.append(f)
    divs = "".join(f'<div id="c{i}"></div>' for i in range(len(figs)))
    items = ",".join(f"Bokeh.embed.embed_item({json.dumps(json_item(fig))}, 'c{i}')" for i, fig in enumerate(figs))
    return (
        f"<html><head><meta charset='utf-8'>{INLINE.render_js()}</head><body>{divs}"
        f"<script>Promise.all([{items}]).then(() => {{ window.drawn = performance.now(); }})</script></body></html>"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("parquet", type=Path)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    d = data(args.parquet)
    pages = {"plotly": plotly_page(d), "vega-lite": vega_page(d), "bokeh": bokeh_page(d)}
    browser = find_browser()
    assert browser, "chromium is needed"
    out = Path(tempfile.mkdtemp(prefix="report-libs-"))
    print("| library | file | drawn (median) | all runs | console errors |\n|---|---|---|---|---|")
    with Browser(browser) as b:
        times: dict[str, list[float]] = {k: [] for k in pages}
        errors: dict[str, int] = dict.fromkeys(pages, 0)
        for _ in range(args.runs):  # interleaved, so that load on the machine hits each alike
            for name, html in pages.items():
                path = out / f"{name}.html"
                path.write_text(html, encoding="utf-8")
                run = b.open(path, "window.drawn", screenshot=False)
                times[name].append(float(run.value or 0.0))
                errors[name] += len(run.errors)
        for name, html in pages.items():
            ms = times[name]
            print(
                f"| {name} | {len(html.encode()) / 2**20:.2f} MiB | {statistics.median(ms):.0f} ms | "
                f"{', '.join(f'{t:.0f}' for t in ms)} | {errors[name]} |"
            )
    print(f"(pages in {out})")


if __name__ == "__main__":
    main()
