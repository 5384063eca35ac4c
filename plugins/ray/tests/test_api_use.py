"""synapse-ray serves through the host's public API: it composes a host (an
around-call hook) rather than subclassing one, and its serving modules import
nothing of the core's residency policy or test support."""

from __future__ import annotations

import ast
from pathlib import Path

import synapse_ray

PACKAGE = Path(synapse_ray.__file__).parent
#: modules that are test support themselves (they may use the core's)
TEST_SUPPORT = {"testing.py", "sandbox.py"}
#: the core modules a serving module may import from
PUBLIC = {"synapse_core", "synapse_core.plugin"}
#: plugin API names for residency policies and for tests, not for serving
NOT_FOR_SERVING = {
    "AdmissionRequest",
    "Decision",
    "Evict",
    "LaneView",
    "Refuse",
    "Reservation",
    "Wait",
    "InProcessWorkers",
    "InProcessProcess",
    "LaunchRecord",
    "transport_plugin",
    "model_entry",
    "catalog_toml",
    "host_config",
    "eventually",
    "pid_exists",
    "make_cli",
    "Conformance",
    "Subject",
}


def serving_modules() -> dict[str, ast.Module]:
    return {
        path.name: ast.parse(path.read_text(encoding="utf-8"))
        for path in sorted(PACKAGE.glob("*.py"))
        if path.name not in TEST_SUPPORT
    }


def core_imports(tree: ast.Module) -> list[tuple[str, str]]:
    """(module, name) of every import from synapse_core."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("synapse_core"):
            found += [(node.module or "", alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(a.name, "") for a in node.names if a.name.startswith("synapse_core")]
    return found


def test_serving_modules_import_only_the_public_api() -> None:
    modules = serving_modules()
    assert {"residency.py", "deployment.py", "replica_host.py"} <= set(modules)
    wrong = {
        f"{name}: {module}.{imported}"
        for name, tree in modules.items()
        for module, imported in core_imports(tree)
        if module not in PUBLIC or imported in NOT_FOR_SERVING
    }
    assert not wrong


def test_no_class_extends_the_host() -> None:
    subclasses = {
        f"{name}: {node.name}"
        for name, tree in serving_modules().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        and any(ast.unparse(base).split(".")[-1] == "Host" for base in node.bases)
    }
    assert not subclasses


def test_the_check_sees_a_private_import() -> None:
    tree = ast.parse("from synapse_core.residency.policy import Wait\nimport synapse_core.host\n")
    assert core_imports(tree) == [
        ("synapse_core.residency.policy", "Wait"),
        ("synapse_core.host", ""),
    ]
