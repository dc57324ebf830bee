"""The corpus layer: present where CI says it must be, and mirrored faithfully by ``fixtures/``."""

from __future__ import annotations

import lzma

import pytest

from .conftest import CORPUS, CORPUS_REQUIRED, FIXTURES, PACKED


def test_the_corpus_is_here_where_ci_needs_it() -> None:
    if not CORPUS.is_dir():
        if CORPUS_REQUIRED:
            pytest.fail(f"CI=true but no corpus at {CORPUS}: put ../shared beside the checkout or set TRACECONV_CORPUS")
        pytest.skip(f"no corpus at {CORPUS}: the fixtures alone are tested")
    assert any(CORPUS.rglob("*.json*")) and any(CORPUS.rglob("*.sqlite"))


@pytest.mark.corpus
def test_every_fixture_from_the_corpus_has_the_corpus_bytes() -> None:
    """A fixture that drifted from its corpus file would test something no user has (``make fixtures`` mends it)."""
    if not CORPUS.is_dir():
        pytest.skip(f"no corpus at {CORPUS}")
    checked = 0
    for stored in sorted(p for p in FIXTURES.rglob("*") if p.is_file()):
        rel = str(stored.relative_to(FIXTURES))
        name = rel[:-3] if rel.endswith(".xz") and rel[:-3] in PACKED else rel
        source = CORPUS / name
        if not source.exists():
            continue  # fixtures of our own (nsys/h200-extra/), or PACKED itself
        data = lzma.decompress(stored.read_bytes()) if name != rel else stored.read_bytes()
        assert data == source.read_bytes(), f"{rel} differs from {source}; run `make fixtures`"
        checked += 1
    assert checked >= 40
