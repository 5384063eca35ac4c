"""``synapse_core.plugin`` is the one module plugins import from."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

import synapse_core.plugin as api

ROOT = Path(__file__).resolve().parent.parent
#: what of synapse_core plugins and the docs may import: the plugin API, and
#: the host API for tools that drive a host
ALLOWED = {"synapse_core.plugin", "synapse_core"}
#: every plugin directory of the checkout (a distribution with a pyproject.toml)
PLUGINS = sorted(p.name for p in (ROOT / "plugins").iterdir() if (p / "pyproject.toml").is_file())
#: the example plugin the docs point transport authors at, tests included
EXAMPLE = ROOT / "docs" / "examples" / "hash_transport"
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)
CORE_IMPORT = re.compile(r"^\s*(?:from|import)\s+(synapse_core[\w.]*)", re.MULTILINE)


def test_every_exported_name_resolves_and_all_lists_exactly_them() -> None:
    assert sorted(api.__all__) == sorted(api._EXPORTS)
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


def test_every_shipped_plugin_is_checked() -> None:
    shipped = {"mock_transport", "ane_direct", "certify", "cpu", "http", "ray"}
    assert shipped <= set(PLUGINS)


@pytest.mark.parametrize("plugin", PLUGINS)
def test_shipped_plugins_import_only_the_public_apis(plugin: str) -> None:
    package = ROOT / "plugins" / plugin / f"synapse_{plugin}"
    assert package.is_dir(), f"plugins/{plugin} has no synapse_{plugin} package"
    files = sorted(package.rglob("*.py"))
    assert files
    imports = {str(f.relative_to(package)): core_imports(f) - ALLOWED for f in files}
    assert {name: found for name, found in imports.items() if found} == {}


def test_the_example_plugin_and_its_tests_import_only_the_public_apis() -> None:
    files = sorted(EXAMPLE.rglob("*.py"))
    assert len(files) >= 4
    imports = {str(f.relative_to(EXAMPLE)): core_imports(f) - ALLOWED for f in files}
    assert {name: found for name, found in imports.items() if found} == {}


def docs_imports(path: Path) -> set[str]:
    """What the ``python`` blocks of a page import from synapse_core."""
    text = path.read_text(encoding="utf-8")
    return {m for block in PYTHON_BLOCK.findall(text) for m in CORE_IMPORT.findall(block)}


def test_the_docs_check_sees_the_imports_of_a_block() -> None:
    page = "```python\nimport synapse_core as s\nfrom synapse_core.wire import Shape\n```\n"
    assert {m for b in PYTHON_BLOCK.findall(page) for m in CORE_IMPORT.findall(b)} == {
        "synapse_core",
        "synapse_core.wire",
    }


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.name)
def test_docs_code_imports_only_the_public_apis(page: Path) -> None:
    assert docs_imports(page) - ALLOWED == set()


def test_writing_a_transport_names_the_plugin_api() -> None:
    page = ROOT / "docs" / "writing-a-transport.md"
    assert "synapse_core.plugin" in docs_imports(page)
    assert "Import from `synapse_core.plugin` only." in page.read_text(encoding="utf-8")
