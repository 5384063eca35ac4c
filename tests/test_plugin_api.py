"""``synapse_core.plugin`` is the one module plugins import from."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import synapse_core.plugin as api

ROOT = Path(__file__).resolve().parent.parent
#: the plugins Synapse ships, and what of synapse_core they may import: the
#: plugin API, and the host API for tools that drive a host
PLUGINS = ["mock_transport", "ane_direct", "certify"]
ALLOWED = {"synapse_core.plugin", "synapse_core"}


def test_every_exported_name_resolves_and_all_lists_exactly_them() -> None:
    assert api.__all__ == sorted(api._EXPORTS)
    for name in api.__all__:
        assert getattr(api, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'Host'"):
        api.Host  # noqa: B018  (the host API lives in synapse_core itself)


def test_a_worker_importing_the_plugin_api_does_not_load_the_host() -> None:
    code = (
        "import sys; from synapse_core.plugin import ModelWorker, WorkerOptions, worker_main; "
        "print(sorted(m for m in ('anyio', 'pluggy', 'synapse_core.host') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def core_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found.update(n for n in names if n.split(".")[0] == "synapse_core")
    return found


@pytest.mark.parametrize("plugin", PLUGINS)
def test_shipped_plugins_import_only_the_public_apis(plugin: str) -> None:
    package = ROOT / "plugins" / plugin / f"synapse_{plugin}"
    if not package.is_dir():
        pytest.skip(f"{plugin} is not in this checkout")
    imports = {f.name: core_imports(f) - ALLOWED for f in sorted(package.glob("*.py"))}
    assert {name: found for name, found in imports.items() if found} == {}
