"""The README documents what the code does: the schema table and every command."""

from __future__ import annotations

import re

from traceconv import schema as S
from traceconv.cli import main

from .conftest import ROOT

README = (ROOT / "README.md").read_text()


def test_readme_schema_table_is_the_generated_one() -> None:
    block = re.search(r"<!-- schema-table:start.*?-->\n(.*?)\n<!-- schema-table:end -->", README, re.S)
    assert block is not None
    assert block.group(1) == S.markdown_table()


def test_every_command_has_help_and_a_readme_section() -> None:
    for name, command in main.commands.items():
        assert command.help and "Example:" in command.help, name
        assert f"`traceconv {name}" in README, name


def test_readme_names_the_two_setup_commands() -> None:
    assert "make demo" in README and "make test" in README
