"""The JavaScript a report inlines: Vega, Vega-Lite and vega-embed, shipped with traceconv, never
fetched from the network.

``vendor/`` holds the three projects' own minified builds, as npm publishes them, and their
licences (BSD-3-Clause); ``vendor/README.md`` says which versions and how to update them. They
are shipped rather than taken from vl-convert-python's bundle, which a plain ``pip install``
did not bring: 0.8 MB of scripts against a 33.5 MB wheel that installs 84 MB (bench/README.md).
"""

from __future__ import annotations

import re
from importlib import resources

# In this order: Vega-Lite needs Vega, vega-embed both (each sets its global: vega, vegaLite, vegaEmbed).
SCRIPTS = ("vega.min.js", "vega-lite.min.js", "vega-embed.min.js")
# A page that fetches nothing names no source map either (a browser's tools would ask for it).
_SOURCE_MAP = re.compile(r"^//# sourceMappingURL=\S*\s*$", re.MULTILINE)


def vega_bundle() -> str:
    """The three scripts, one after the other, as one script's text."""
    folder = resources.files("traceconv.render.report") / "vendor"
    return "\n".join(_SOURCE_MAP.sub("", (folder / name).read_text(encoding="utf-8")) for name in SCRIPTS)
