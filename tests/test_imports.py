"""Imports flow one way (CONTRIBUTING.md): schema <- readers <- io <- analyses <- render <- cli, and inside the
Parquet modules dataset <- io <- ingest <- writing (they imported each other in a circle).

Read from the source with ``ast``: every import, the ones inside functions too (where the lazy ones
are), except those only for type checking; not from what one run happens to import.
"""

from __future__ import annotations

import ast
from pathlib import Path

from .conftest import ROOT

# Lowest first; a module may import its own layer and the layers before it, never one after it.
LAYERS = (
    ("traceconv.errors", "traceconv.units", "traceconv.names", "traceconv.process", "traceconv.background"),
    ("traceconv.schema", "traceconv.thrift"),
    ("traceconv.parquet_join",),
    ("traceconv.readers",),
    ("traceconv.dataset",),
    ("traceconv.io",),
    ("traceconv.ingest",),
    ("traceconv.writing",),
    ("traceconv.batch", "traceconv.fleet", "traceconv.torch"),
    ("traceconv.analyses",),
    ("traceconv.render",),
    ("traceconv.cli",),
)
PACKAGE = ROOT / "traceconv"


def _name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> int | None:
    for i, names in enumerate(LAYERS):
        if any(module == n or module.startswith(n + ".") for n in names):
            return i
    return None


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(path: Path) -> set[str]:
    """The traceconv modules (or names in them) that ``path`` imports, type-checking blocks aside."""
    module = _name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    stack: list[ast.AST] = [ast.parse(path.read_text(encoding="utf-8"))]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            found.update(f"{base}.{a.name}" for a in node.names)
        stack.extend(ast.iter_child_nodes(node))
    return {name for name in found if name.startswith("traceconv.")}


def test_every_module_has_a_layer() -> None:
    modules = [_name(p) for p in sorted(PACKAGE.rglob("*.py"))]
    assert [m for m in modules if m != "traceconv" and _layer(m) is None] == []


def test_imports_flow_one_way() -> None:
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _name(path)
        here = _layer(module)
        if here is None:  # the package's own __init__: its API is looked up by name, lazily
            continue
        for name in sorted(_imports(path)):
            there = _layer(name)
            if there is not None and there > here:
                upward.append(f"{module} imports {name}")
    assert upward == []
