"""Keep pandas out of processes that only convert.

pyarrow imports pandas (about 50 MB of RSS and 0.3 s) the first time ``pa.array`` is given
anything but a numpy array, only to ask whether it is a pandas object. A conversion never
passes one, so the CLI's convert commands let that first probe find no pandas. pyarrow
remembers the answer for that probe only: an explicit ``to_pandas()`` later still imports
pandas as usual.
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import pyarrow as pa


class _NoPandas(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        if fullname == "pandas" or fullname.startswith("pandas."):
            raise ImportError("pandas is not needed to convert a trace")
        return None


def skip_pandas_probe() -> None:
    if "pandas" in sys.modules:  # already paid for: nothing to save
        return
    finder = _NoPandas()
    sys.meta_path.insert(0, finder)
    try:
        pa.array([0])
    finally:
        sys.meta_path.remove(finder)
