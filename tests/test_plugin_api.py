"""``synapse_core.plugin`` is the transport authors' module, and the docs
import only the published modules (``tests/test_plugin_audiences.py`` holds
each plugin to its audience's)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import synapse_core.plugin as api

from .test_plugin_audiences import PUBLIC

ROOT = Path(__file__).resolve().parent.parent
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
        "import sys; from synapse_core.plugin import ModelWorker, WorkerOptions, worker_main, "
        "HashWorker; print(sorted(m for m in ('anyio', 'pluggy', 'synapse_core.host') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


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
def test_docs_code_imports_only_the_published_modules(page: Path) -> None:
    assert docs_imports(page) - PUBLIC == set()


def test_writing_a_transport_names_each_audiences_module() -> None:
    page = ROOT / "docs" / "writing-a-transport.md"
    assert {"synapse_core.plugin", "synapse_core.testing"} <= docs_imports(page)
    text = page.read_text(encoding="utf-8")
    for module in ("synapse_core.policy", "synapse_core.events", "synapse_core.cli"):
        assert f"`{module}`" in text, module
