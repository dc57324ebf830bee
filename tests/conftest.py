"""Where the tests find real files: ``fixtures/`` (always here) and the corpus (an extra layer).

``fixtures/`` mirrors ``../shared/corpus`` (``make fixtures`` copies it: see
``tests/tools/sync_fixtures.py``), so that a clone with no corpus beside it tests the same
behaviour. Large JSON, SQLite and CSV files are stored there as ``.xz``; :func:`fixture`
hands out a decompressed copy (made once, in ``build/fixtures/``). The corpus layer sweeps
the corpus files that ``fixtures/`` does not hold (files added to the corpus since the last
``make fixtures``); those tests are marked ``corpus``. Under ``CI=true`` a missing corpus is
a failure (``tests/test_corpus.py``), elsewhere the layer is simply empty.
"""

from __future__ import annotations

import fnmatch
import gc
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from .fixtures import FIXTURES, PACKED, ROOT, fixture, fixture_name

CORPUS = Path(os.environ.get("TRACECONV_CORPUS") or ROOT.parent / "shared" / "corpus")
CORPUS_REQUIRED = os.environ.get("CI", "").lower() == "true"
__all__ = [
    "CORPUS",
    "CORPUS_REQUIRED",
    "FIXTURES",
    "PACKED",
    "ROOT",
    "corpus_extra",
    "fixture",
    "fixture_files",
    "fixture_name",
    "real_files",
]


def _names(base: Path, sub: str, patterns: Sequence[str], unpack: bool) -> list[str]:
    """Relative names of the files under ``base/sub`` matching ``patterns`` (with ``unpack``, a
    packed fixture by the name of its content)."""
    root = base / sub
    if not root.is_dir():
        return []
    found = set()
    for path in root.rglob("*"):
        if not path.is_file() or path.name.startswith(".") or path.name == "PACKED":
            continue
        rel = str(path.relative_to(base))
        if unpack and rel.endswith(".xz") and rel[:-3] in PACKED:
            rel = rel[:-3]
        if any(fnmatch.fnmatch(Path(rel).name, p) for p in patterns):
            found.add(rel)
    return sorted(found)


def fixture_files(sub: str, patterns: Sequence[str]) -> list[Path]:
    """Every real file of ``fixtures/<sub>`` whose name (without ``.xz``) matches one of ``patterns``."""
    return [fixture(rel) for rel in _names(FIXTURES, sub, patterns, unpack=True)]


def corpus_extra(sub: str, patterns: Sequence[str]) -> list[Any]:
    """Corpus files matching ``patterns`` that ``fixtures/`` does not mirror, as ``corpus``-marked params."""
    mirrored = set(_names(FIXTURES, sub, patterns, unpack=True))
    extra = [rel for rel in _names(CORPUS, sub, patterns, unpack=False) if rel not in mirrored]
    return [pytest.param(CORPUS / rel, marks=pytest.mark.corpus, id=Path(rel).name) for rel in extra]


def real_files(sub: str, patterns: Sequence[str]) -> list[Any]:
    """The sweep over real files: every fixture, then the corpus files the fixtures lack."""
    return [*fixture_files(sub, patterns), *corpus_extra(sub, patterns)]


def param_path(item: Any) -> Path:
    """The path of an item of :func:`real_files` (a Path or a pytest param)."""
    return Path(item.values[0]) if hasattr(item, "values") else Path(item)


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


# What the tests may add to the checkout's root: the fixtures' cache (build/) and the tools' own.
ROOT_MADE = frozenset({"build", ".pytest_cache", ".hypothesis", ".mypy_cache", ".ruff_cache"})


@pytest.fixture(scope="session", autouse=True)
def _nothing_written_into_the_checkout() -> Iterator[None]:
    """Tests write under tmp_path (or build/), never into the checkout: an empty ``.nsys-rep`` was once
    committed at its root, and no test may leave another."""
    before = {p.name for p in ROOT.iterdir()}
    yield
    new = {p.name for p in ROOT.iterdir()} - before - ROOT_MADE
    assert not new, f"the tests wrote {sorted(new)} into {ROOT}; write under tmp_path instead"


@pytest.fixture(autouse=True)
def _collection_as_it_was() -> Iterator[None]:
    """A command run in this process (click's test runner) switches cyclic collection off for its
    imports (``process.tune``); one that fails before it is done must not leave the tests after it
    without collection."""
    yield
    gc.enable()
