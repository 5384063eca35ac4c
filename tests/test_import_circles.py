"""No import circles among the modules of synapse_core, nor of any plugin package.

What counts as an import of module B by module A (read from A's source, never
by importing it): every ``import`` statement in A, wherever it stands: at
module level, under ``if TYPE_CHECKING:`` and inside functions. A circle that
only a function-level or type-checking import closes still means two modules
that each need the other, which is what this keeps out; deferring an import
hides such a circle from Python, not from readers. ``from P import name``
counts as importing ``P.name`` when that is a module, else ``P`` itself. The
package ``__init__`` that Python runs before a submodule is not counted: that
is how packages load, not a dependency a module chose.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = [
    ROOT / "synapse_core",
    *sorted(p for p in (ROOT / "plugins").glob("*/synapse_*") if (p / "__init__.py").is_file()),
    ROOT / "docs" / "examples" / "hash_transport" / "synapse_hash_transport",
]


def module_name(package: Path, path: Path) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(name: str, path: Path, modules: set[str]) -> Iterator[str]:
    """The modules of ``modules`` that module ``name`` (at ``path``) imports."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name in modules)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                target = sub if sub in modules else source
                if target in modules:
                    yield target


def import_graph(package: Path) -> dict[str, set[str]]:
    paths = {module_name(package, p): p for p in sorted(package.rglob("*.py"))}
    modules = set(paths)
    return {name: set(imported(name, path, modules)) - {name} for name, path in paths.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.name)
def test_no_import_circle(package: Path) -> None:
    graph = import_graph(package)
    assert len(graph) > 1
    assert circles(graph) == []


def test_a_circle_closed_only_inside_a_function_or_for_type_checking_counts(
    tmp_path: Path,
) -> None:
    package = tmp_path / "demo"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("from .b import thing\n")
    (package / "b.py").write_text("def f():\n    from . import a\n")
    (package / "c.py").write_text("from demo.sub import d\n")
    (package / "sub" / "d.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .. import c\n"
    )
    (package / "e.py").write_text("import demo.a\n")
    graph = import_graph(package)
    assert graph["demo.e"] == {"demo.a"}
    assert circles(graph) == [["demo.a", "demo.b"], ["demo.c", "demo.sub.d"]]
