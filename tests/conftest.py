from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
CORPUS = ROOT.parent / "shared" / "corpus"


def corpus_files(sub: str, patterns: tuple[str, ...]) -> list[Path]:
    """Real files of ../shared/corpus/<sub>, or the bundled fixtures when the corpus is absent."""
    base = CORPUS / sub
    if not base.exists():
        base = FIXTURES / sub.split("/")[0]
    found: set[Path] = set()
    for pattern in patterns:
        found.update(base.rglob(pattern))
    return sorted(found)


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES
