"""synapse-ray composes its host (an around-call hook) rather than extending
it. (Which core modules and names it may import at all is checked with every
plugin's, in tests/test_plugin_audiences.py.)"""

from __future__ import annotations

import ast
from pathlib import Path

import synapse_ray

PACKAGE = Path(synapse_ray.__file__).parent


def host_subclasses(source: str) -> list[str]:
    """Classes of ``source`` with a base named ``Host`` (however imported)."""
    return [
        node.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ClassDef)
        and any(ast.unparse(base).split(".")[-1] == "Host" for base in node.bases)
    ]


def test_no_class_extends_the_host() -> None:
    modules = sorted(PACKAGE.glob("*.py"))
    assert {"residency.py", "deployment.py", "replica_host.py"} <= {p.name for p in modules}
    found = {p.name: host_subclasses(p.read_text(encoding="utf-8")) for p in modules}
    assert not {name: classes for name, classes in found.items() if classes}


def test_the_check_sees_a_subclass() -> None:
    source = "import synapse_core\nclass A(synapse_core.Host): ...\nclass B(Host, X): ...\n"
    assert host_subclasses(source) == ["A", "B"]
