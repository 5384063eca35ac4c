"""Each plugin imports only the published modules of its audience, only names
they publish, and no other plugin.

Synapse publishes one module per audience (see ``docs/writing-a-transport.md``):
``synapse_core`` (the host API), ``synapse_core.plugin`` (transports and their
workers), ``synapse_core.policy`` (residency policies), ``synapse_core.events``
(observers), ``synapse_core.cli`` (plugins that add commands),
``synapse_core.frontend`` (front ends: the HTTP server, a command line) and
``synapse_core.testing`` with its submodules (tests). Every import statement
counts: at module level, under ``TYPE_CHECKING`` and inside functions. A
plugin's ``tests/`` may use any of them (and more); a module of a plugin
package named ``testing`` is test support and may use the testing modules.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent

HOST = "synapse_core"
TRANSPORT = "synapse_core.plugin"
POLICY = "synapse_core.policy"
EVENTS = "synapse_core.events"
CLI = "synapse_core.cli"
FRONTEND = "synapse_core.frontend"
TESTING = frozenset(
    {
        "synapse_core.testing",
        "synapse_core.testing.conformance",
        "synapse_core.testing.fake",
        "synapse_core.testing.pytest_plugin",
    }
)
PUBLIC = frozenset({HOST, TRANSPORT, POLICY, EVENTS, CLI, FRONTEND, *TESTING})

#: what each shipped plugin's package may import, by its audiences
ALLOWED: dict[str, frozenset[str]] = {
    "mock_transport": frozenset({HOST, TRANSPORT}),
    "ane_direct": frozenset({HOST, TRANSPORT}),
    # a transport that charges its lane in MiB (synapse_admission_cost) and
    # adds `synapse pull` (hub models)
    "cpu": frozenset({HOST, TRANSPORT, POLICY, CLI}),
    # a transport that charges its GPU lanes in MiB and waits when one is full
    # (synapse_admission_cost, synapse_lane_full)
    "cuda": frozenset({TRANSPORT, POLICY}),
    # the model home, a library: its error is a SynapseError, its tokenizer
    # the plugin API's
    "models": frozenset({TRANSPORT}),
    # an observer with commands
    "certify": frozenset({HOST, EVENTS, CLI}),
    # the host API, `synapse serve`, and a front end's names and bounds
    "http": frozenset({HOST, CLI, FRONTEND}),
    # the host API (it composes a host with an around-call hook) and the
    # front-end module: the HTTP app it serves, found by name, and the
    # helpers for its own settings (FieldInvalid, positive, structuring_problems)
    "ray": frozenset({HOST, FRONTEND}),
}
PLUGINS = sorted(p.name for p in (ROOT / "plugins").iterdir() if (p / "pyproject.toml").is_file())
#: distributions under plugins/ that are libraries, not plugins: every lane
#: may import them (and they import no plugin)
LIBRARIES = frozenset({"synapse_models"})
#: the plugins that read models through the model home
MODEL_LANES = frozenset({"cpu", "ane_direct", "cuda"})
EXAMPLE = ROOT / "docs" / "examples" / "hash_transport"


def imports(path: Path) -> Iterator[tuple[str, str | None, int]]:
    """``(module, name, line)`` of every absolute import in ``path``; ``name``
    is None for ``import module``."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                yield node.module, alias.name, node.lineno
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None, node.lineno


def is_test_support(path: Path, package: Path) -> bool:
    return "testing" in path.relative_to(package).with_suffix("").parts


def published(module: str) -> frozenset[str]:
    """What a public module publishes: its ``__all__`` and its public submodules."""
    names = set(getattr(importlib.import_module(module), "__all__", ()))
    names.update(p.rsplit(".", 1)[1] for p in PUBLIC if p.rpartition(".")[0] == module)
    return frozenset(names)


def audience_problems(package: Path, allowed: frozenset[str]) -> list[str]:
    """Imports of ``synapse_core`` in ``package`` outside ``allowed`` modules,
    or of names those modules do not publish."""
    problems = []
    for path in sorted(package.rglob("*.py")):
        where = path.relative_to(package.parent)
        ok = allowed | TESTING if is_test_support(path, package) else allowed
        for module, name, line in imports(path):
            if module.split(".")[0] != "synapse_core":
                continue
            if module not in ok:
                problems.append(f"{where}:{line} imports {module}")
            elif name is not None and name not in published(module):
                problems.append(
                    f"{where}:{line} imports {name} from {module}, which does not publish it"
                )
    return problems


def plugin_package(plugin: str) -> Path:
    package = ROOT / "plugins" / plugin / f"synapse_{plugin}"
    assert package.is_dir(), f"plugins/{plugin} has no synapse_{plugin} package"
    return package


def test_every_shipped_plugin_has_an_audience() -> None:
    assert set(PLUGINS) == set(ALLOWED)


def test_the_model_home_is_a_library_not_a_plugin() -> None:
    """It registers no entry point: lanes import it, Synapse never loads it."""
    pyproject = (ROOT / "plugins" / "models" / "pyproject.toml").read_text(encoding="utf-8")
    assert "entry-points" not in pyproject


def family_branches(source: str, names: set[str]) -> list[tuple[int, str]]:
    """``(line, name)`` of each of ``names`` that ``source`` branches on:
    compares with, keys a table by, or matches a case on."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            branching: list[ast.AST] = [node.left, *node.comparators]
        elif isinstance(node, ast.Dict):
            branching = [k for k in node.keys if k is not None]
        elif isinstance(node, ast.match_case):
            branching = [node.pattern]
        else:
            continue
        for part in branching:
            for leaf in ast.walk(part):
                if isinstance(leaf, ast.Constant) and leaf.value in names:
                    found.append((leaf.lineno, str(leaf.value)))
    return found


def test_no_module_outside_the_families_compares_a_family_name() -> None:
    """Architecture and model-type names live in ``synapse_models/families``:
    no other module of any plugin branches on one."""
    names = {"bert", "xlm-roberta", "mpnet", "modernbert", "roberta", "xlm_roberta"}
    names |= {n for f in _families() for n in (f.name, *f.model_types)}
    found = []
    for plugin in PLUGINS:
        package = plugin_package(plugin)
        for path in sorted(package.rglob("*.py")):
            if "families" in path.relative_to(package).parts:
                continue
            for line, name in family_branches(path.read_text(encoding="utf-8"), names):
                found.append(f"{path.relative_to(ROOT)}:{line}: {name!r}")
    assert found == []


def test_the_family_name_scan_sees_each_way_of_branching() -> None:
    source = (
        "if arch == 'bert': pass\n"
        "if model_type in ('x', 'mpnet'): pass\n"
        "TABLE = {'modernbert': 1}\n"
        "match kind:\n    case 'xlm-roberta': pass\n"
        "print('bert')\n"
    )
    names = {"bert", "mpnet", "modernbert", "xlm-roberta"}
    assert family_branches(source, names) == [
        (1, "bert"),
        (2, "mpnet"),
        (3, "modernbert"),
        (5, "xlm-roberta"),
    ]


def _families() -> list[Any]:
    try:
        from synapse_models.families import FAMILIES
    except ImportError:  # the core alone: the names above are checked
        return []
    return list(FAMILIES.values())


@pytest.mark.parametrize("plugin", PLUGINS)
def test_each_plugin_imports_only_its_audiences_modules(plugin: str) -> None:
    assert audience_problems(plugin_package(plugin), ALLOWED[plugin]) == []


def plugin_modules() -> dict[str, str]:
    """top-level package -> plugin directory, for every shipped plugin."""
    return {f"synapse_{p}": p for p in PLUGINS}


@pytest.mark.parametrize("plugin", PLUGINS)
def test_no_plugin_imports_another(plugin: str) -> None:
    """A plugin that needs another's work finds it through an entry point or
    a hook (synapse-ray finds synapse-http's app in ``synapse.apps``); the
    model home is a library the model lanes import, and it imports none."""
    allowed = {f"synapse_{plugin}"} | (LIBRARIES if plugin in MODEL_LANES else set())
    others = set(plugin_modules()) - allowed
    found = {
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in plugin_package(plugin).rglob("*.py")
        for module, _, line in imports(path)
        if module.split(".")[0] in others
    }
    assert found == set()


@pytest.mark.parametrize("plugin", ["http", "ray"])
def test_the_http_and_ray_plugins_import_no_policy_or_testing_module(plugin: str) -> None:
    """They drive a host and serve it; residency policy is the host's, and
    test support is for tests (their own ``testing`` helpers, used by their
    tests, are the only modules that may reach it)."""
    assert not ALLOWED[plugin] & {POLICY, *TESTING}
    package = plugin_package(plugin)
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in sorted(package.rglob("*.py"))
        if not is_test_support(path, package)
        for module, _, line in imports(path)
        if module == POLICY or module.startswith(("synapse_core.residency", "synapse_core.testing"))
    ]
    assert found == []


def test_the_front_end_module_publishes_what_a_front_end_uses() -> None:
    """synapse-http reads names and bounds from it, synapse-ray the app lookup."""
    used = {
        name
        for plugin in ("http", "ray")
        for path in plugin_package(plugin).rglob("*.py")
        for module, name, _ in imports(path)
        if module == FRONTEND
    }
    assert {"shown", "bounded", "give_back", "map_large_blocks", "app_factory"} <= used
    assert used <= published(FRONTEND)


def test_the_example_plugin_imports_only_the_transport_api() -> None:
    package = EXAMPLE / "synapse_hash_transport"
    assert audience_problems(package, frozenset({HOST, TRANSPORT})) == []
    tests = sorted((EXAMPLE / "tests").glob("*.py"))
    assert tests
    problems = [
        f"{path.name}:{line} imports {module}"
        for path in tests
        for module, _, line in imports(path)
        if module.split(".")[0] == "synapse_core" and module not in PUBLIC
    ]
    assert problems == []


def test_the_scan_sees_every_kind_of_import(tmp_path: Path) -> None:
    package = tmp_path / "synapse_demo"
    package.mkdir()
    (package / "a.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from synapse_core.plugin import Transport, host_config\n"
        "if TYPE_CHECKING:\n"
        "    from synapse_core.residency.policy import LaneView\n"
        "def f():\n"
        "    import synapse_core.host\n",
        encoding="utf-8",
    )
    (package / "testing.py").write_text("from synapse_core.testing import model_entry\n")
    found = audience_problems(package, frozenset({HOST, TRANSPORT}))
    assert [p.split(" ", 1)[1] for p in found] == [
        "imports host_config from synapse_core.plugin, which does not publish it",
        "imports synapse_core.residency.policy",
        "imports synapse_core.host",
    ]
