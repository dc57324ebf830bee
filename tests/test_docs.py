"""The docs document what the code does: every command has help, a page in docs/ and a row in the
README's Commands table; the schema table is the generated one; the README stays a first page; and
every relative link in the README and docs/ leads somewhere."""

from __future__ import annotations

import re
from pathlib import Path

from traceconv import schema as S
from traceconv.cli import main

from .conftest import ROOT

README = ROOT / "README.md"
DOCS = ROOT / "docs"
README_MAX_LINES = 300
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")


def _commands_table() -> dict[str, str]:
    """The README's Commands table: command name -> the page its row links to."""
    section = README.read_text().split("\n## Commands\n", 1)[1].split("\n## ", 1)[0]
    return dict(re.findall(r"^\| \[`traceconv (\w+)`\]\(([^)]+)\) \|", section, re.M))


def _prose(text: str) -> str:
    """Markdown without its code: links inside code are not links."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def _anchors(page: Path) -> set[str]:
    """The anchors GitHub makes of a page's headings: lower case, punctuation dropped, spaces as -."""
    headings = re.findall(r"^#+ (.+)$", FENCE.sub("", page.read_text()), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_the_schema_table_in_docs_is_the_generated_one() -> None:
    text = (DOCS / "schema.md").read_text()
    block = re.search(r"<!-- schema-table:start.*?-->\n(.*?)\n<!-- schema-table:end -->", text, re.S)
    assert block is not None
    assert block.group(1) == S.markdown_table()


def test_every_command_has_help_a_docs_page_and_a_row_in_the_readme() -> None:
    rows = _commands_table()
    for name, command in main.commands.items():
        assert command.help and "Example:" in command.help, name
        page = DOCS / f"{name}.md"
        assert page.is_file(), f"{name}: no {page.relative_to(ROOT)}"
        assert page.read_text().startswith(f"# `traceconv {name}`"), f"{page.name} is not about {name}"
        assert rows.get(name) == f"docs/{name}.md", f"{name}: no row in the README's Commands table"
    assert set(rows) == set(main.commands), "a row for a command that does not exist"


def test_readme_names_the_two_setup_commands() -> None:
    text = README.read_text()
    assert "make demo" in text and "make test" in text


def test_readme_is_a_first_page_not_the_manual() -> None:
    lines = len(README.read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; the reference belongs in docs/"


def test_every_relative_link_in_the_readme_and_docs_leads_somewhere() -> None:
    pages = [README, ROOT / "CONTRIBUTING.md", *sorted(DOCS.glob("*.md"))]
    broken = []
    for page in pages:
        for target in LINK.findall(_prose(page.read_text())):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if not resolved.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_no_user_doc_points_outside_the_repository() -> None:
    for page in [README, ROOT / "CONTRIBUTING.md", *DOCS.glob("*.md")]:
        assert "STYLE.md" not in page.read_text(), f"{page.name}: a clone has no ../shared/STYLE.md"
