"""The example plugin in docs/examples is written against the plugin API alone."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parent.parent / "docs" / "examples" / "hash_transport"
PACKAGE = EXAMPLE / "synapse_hash_transport"


def synapse_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.split(".")[0] == "synapse_core"}


@pytest.mark.parametrize("path", sorted(PACKAGE.glob("*.py")), ids=lambda p: p.name)
def test_the_example_imports_only_synapse_core_plugin(path: Path) -> None:
    assert synapse_imports(path) <= {"synapse_core.plugin"}


def test_the_example_worker_writes_only_load_and_embed() -> None:
    tree = ast.parse((PACKAGE / "worker.py").read_text(encoding="utf-8"))
    [worker] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "HashWorker"]
    methods = {n.name for n in worker.body if isinstance(n, ast.FunctionDef)}
    assert methods == {"load", "embed"}
    assert any(isinstance(b, ast.Name) and b.id == "ModelWorker" for b in worker.bases)


def test_the_example_tests_are_the_conformance_suite() -> None:
    tests = sorted(p.name for p in (EXAMPLE / "tests").glob("test_*.py"))
    assert tests == ["test_conformance.py"]
    assert synapse_imports(EXAMPLE / "tests" / "test_conformance.py") == {
        "synapse_core.testing.conformance"
    }
