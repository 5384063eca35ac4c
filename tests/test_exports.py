"""The lazily loaded public modules list their names once each way: ``__all__``, the
lazy export map, and the imports type checkers read must agree."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from types import ModuleType

import pytest

import synapse_core
import synapse_core.errors as errors
import synapse_core.events as events_api
import synapse_core.frontend as frontend_api
import synapse_core.plugin as plugin_api
import synapse_core.policy as policy_api


def _type_checking_imports(module: ModuleType) -> dict[str, str]:
    """name -> submodule, from the module's ``if TYPE_CHECKING:`` imports."""
    found: dict[str, str] = {}
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom) and stmt.level == 1, ast.unparse(stmt)
                assert stmt.module is not None
                for alias in stmt.names:
                    found[alias.asname or alias.name] = stmt.module
    return found


@pytest.mark.parametrize(
    "module",
    [synapse_core, plugin_api, policy_api, events_api, frontend_api],
    ids=lambda m: m.__name__,
)
def test_all_the_lazy_map_and_the_typed_imports_agree(module: ModuleType) -> None:
    exports: dict[str, str] = module._EXPORTS
    assert sorted(set(module.__all__) - {"__version__"}) == sorted(exports)
    assert _type_checking_imports(module) == exports
    for name in exports:
        assert getattr(module, name) is not None, name


def test_front_end_helpers_are_published_only_for_front_ends() -> None:
    """Applications see the host API; names in messages, tokenising bounds
    and the app lookup are the front-end module's alone."""
    assert set(frontend_api.__all__).isdisjoint(synapse_core.__all__)


def test_every_error_a_caller_can_see_is_exported() -> None:
    public = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type)
        and issubclass(value, errors.SynapseError)
        and value.__module__ == errors.__name__
    }
    # Raised only inside the host or the CLI, never to a host API caller.
    internal = {"ExitUnconfirmed", "IdentityChanged"}
    assert public - internal <= set(synapse_core.__all__)


#: exception classes defined beside the code that raises them, and why
DEFINED_ELSEWHERE = {
    # a click exception (its exit status and message); errors.py imports
    # nothing, so that worker processes can load it without click
    "synapse_core.cli.report.InputError",
}


def _modules() -> list[str]:
    names = [synapse_core.__name__]
    for info in pkgutil.walk_packages(synapse_core.__path__, "synapse_core."):
        if not info.name.endswith("__main__"):  # importing those would run them
            names.append(info.name)
    return names


def test_every_exception_class_is_defined_in_errors() -> None:
    found = set()
    for name in _modules():
        for value in vars(importlib.import_module(name)).values():
            if (
                isinstance(value, type)
                and issubclass(value, BaseException)
                and value.__module__ == name
                and name != errors.__name__
            ):
                found.add(f"{name}.{value.__qualname__}")
    assert found == DEFINED_ELSEWHERE
