"""Finding an ASGI app factory by name in the ``synapse.apps`` entry-point group.

Entry points are faked: ``importlib.metadata.entry_points`` returns real
:class:`~importlib.metadata.EntryPoint` objects pointing at standard-library
callables and at the modules in ``plugin_fixtures``.
"""

from __future__ import annotations

import importlib.metadata as md
import operator
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from synapse_core.errors import PluginError
from synapse_core.frontend import APPS_GROUP, app_factory

Install = Callable[..., None]


@pytest.fixture
def install(monkeypatch: pytest.MonkeyPatch) -> Install:
    """Make ``entry_points(group=...)`` return the given ``(name, value)`` pairs."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    monkeypatch.delitem(sys.modules, "plugin_fixtures.raises_on_import", raising=False)

    def set_installed(*pairs: tuple[str, str]) -> None:
        eps = [md.EntryPoint(name=name, value=value, group=APPS_GROUP) for name, value in pairs]

        def entry_points(*, group: str) -> md.EntryPoints:
            return md.EntryPoints(ep for ep in eps if ep.group == group)

        monkeypatch.setattr(md, "entry_points", entry_points)

    return set_installed


def test_the_factory_of_that_name_is_loaded(install: Install) -> None:
    install(("other", "operator:add"), ("web", "operator:call"))
    assert app_factory("web", "synapse-web") is operator.call


def test_the_same_entry_point_listed_twice_is_one(install: Install) -> None:
    install(("web", "operator:call"), ("web", "operator:call"))
    assert app_factory("web", "synapse-web") is operator.call


def test_a_missing_app_names_what_to_install(install: Install) -> None:
    install(("other", "operator:add"))
    with pytest.raises(PluginError, match=r"no ASGI app named 'web'.*pip install synapse-web"):
        app_factory("web", "synapse-web")


def test_two_apps_of_one_name_are_refused(install: Install) -> None:
    install(("web", "operator:call"), ("web", "operator:add"))
    with pytest.raises(
        PluginError, match=r"2 ASGI apps are named 'web'.*operator:add, operator:call"
    ):
        app_factory("web", "synapse-web")


def test_an_app_that_fails_to_load_says_which_and_why(install: Install) -> None:
    install(("web", "plugin_fixtures.raises_on_import:app"))
    with pytest.raises(PluginError, match=r"'web' \(plugin_fixtures.raises_on_import:app\) failed"):
        app_factory("web", "synapse-web")


def test_an_entry_point_that_is_no_factory_is_refused(install: Install) -> None:
    install(("web", "operator:__name__"))
    with pytest.raises(PluginError, match=r"is str, not a factory"):
        app_factory("web", "synapse-web")
