"""The JavaScript a report inlines: Vega, Vega-Lite and vega-embed in one bundle, from the
``vl-convert-python`` wheel (the optional ``report`` extra), never from the network.

vl-convert builds the bundle in 3-4 s; it is kept in the user's cache folder
(``$XDG_CACHE_HOME/traceconv``, else ``~/.cache/traceconv``), named by vl-convert's version, and
built again when that is missing or unwritable.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from traceconv.errors import ToolMissingError


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "traceconv"


def vega_bundle() -> str:
    """The bundle's text (cached; see the module)."""
    try:
        import vl_convert
    except ImportError:
        raise ToolMissingError(
            None,
            "`traceconv report` needs vl-convert-python (the JavaScript of Vega-Lite that a report inlines)",
            "pip install 'traceconv[report]'",
        ) from None
    version = getattr(vl_convert, "__version__", "unknown")
    cached = _cache_dir() / f"vega-bundle-{version}.js"
    try:
        text = cached.read_text(encoding="utf-8")
        if text:
            return text
    except OSError:
        pass
    # Without a snippet: the default one, which sets the globals vegaEmbed, vegaLite and vega (its stub omits it).
    bundle: str = vl_convert.javascript_bundle()  # type: ignore[call-arg]
    _keep(cached, bundle)
    return bundle


def _keep(path: Path, text: str) -> None:
    """Write the cache file under a temporary name and rename it; a cache that cannot be written is skipped."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError:
        return
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except OSError:
        Path(tmp).unlink(missing_ok=True)
