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
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from .fixtures import CACHE, FIXTURES, PACKED, ROOT, fixture, fixture_name

CORPUS = Path(os.environ.get("TRACECONV_CORPUS") or ROOT.parent / "shared" / "corpus")
# `make test` runs with --hypothesis-profile=fast: the property tests that convert a trace per
# example (tests/test_properties.py) take 10 examples instead of 30; `make check` runs them all.
settings.register_profile("fast", max_examples=10)
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


# -- make test: each sweep over real files on one file of each format ----------------------------
# A sweep repeats one check over the real files (SWEEP_MIN of them or more). `make test` runs each
# check on one PyTorch trace and one Nsight Systems export of its files (the project's own H200
# pair where the sweep has them, else the smallest) and marks the others `sweep`, which `make
# check` runs too. Whole in both: the sweeps that say every file converts, so that the fast suite
# still converts every file the sweeps cover, and the golden pairs of key_averages(), one torch
# feature each.
SWEEP_MIN = 4
SWEEP_KEEPS = ("train_buggy.pt.trace.json.gz", "buggy.sqlite")
WHOLE_SWEEPS = frozenset(
    {
        "test_rows_per_kind_equal_input_events",
        "test_every_export_converts_with_one_row_per_source_row",
        "test_every_torch_row_is_there_with_its_numbers",
        "test_the_table_reads_as_torch_printed_it",
    }
)
_REAL_ROOTS = (FIXTURES, CACHE, CORPUS)


def _real_file(item: pytest.Item) -> tuple[Path | None, tuple[tuple[str, str], ...]]:
    """The real file an item of a sweep runs on (None: not a sweep's item), and its other parameters."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None, ()
    path, others = None, []
    for name, value in sorted(callspec.params.items()):
        if isinstance(value, Path) and any(value.is_relative_to(r) for r in _REAL_ROOTS):
            path = value
        else:
            others.append((name, repr(value)))
    return path, tuple(others)


def _kept_first(path: Path) -> tuple[int, int]:
    preferred = SWEEP_KEEPS.index(path.name) if path.name in SWEEP_KEEPS else len(SWEEP_KEEPS)
    return preferred, path.stat().st_size if path.exists() else 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    sweeps: dict[tuple[Any, ...], list[tuple[Path, pytest.Item]]] = defaultdict(list)
    for item in items:
        path, others = _real_file(item)
        name = getattr(item, "originalname", item.name)
        if path is not None and name not in WHOLE_SWEEPS:
            sweeps[(item.path, name, others)].append((path, item))
    for members in sweeps.values():
        if len(members) < SWEEP_MIN:
            continue
        kept: set[str] = set()
        for path, item in sorted(members, key=lambda m: _kept_first(m[0])):
            fmt = "nsys" if path.suffix == ".sqlite" else "pytorch"
            if fmt in kept:
                item.add_marker(pytest.mark.sweep)
            kept.add(fmt)
