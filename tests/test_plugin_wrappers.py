"""Hook wrappers run around every hook the host calls, however it calls it.

``PluginHost`` calls some hooks per plugin (the registration hooks, so one
broken plugin cannot hide the others) and the others through pluggy's
ordinary dispatch. Wrappers, new style (``wrapper=True``) and old
(``hookwrapper=True``), must run on both paths.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any

import click
import pytest

from synapse_core.catalog import Catalog
from synapse_core.config import HostConfig, ModelSpec
from synapse_core.hookspecs import hookimpl
from synapse_core.plugins import PluginHost
from synapse_core.testing import transport_plugin
from synapse_core.testing.fake import InProcessFakeTransport
from synapse_core.transport import Transport

BUCKETS = (8, 16, 32)


class NewStyle:
    """Wraps every hook under test with ``wrapper=True``; records each call."""

    __name__ = "new-style-wrapper"

    def __init__(self) -> None:
        self.calls: list[str] = []

    @hookimpl(wrapper=True)
    def synapse_register_transports(
        self, register: Callable[[Transport], None]
    ) -> Generator[None, Any, Any]:
        self.calls.append("synapse_register_transports")
        return (yield)

    @hookimpl(wrapper=True)
    def synapse_register_commands(self, cli: click.Group) -> Generator[None, Any, Any]:
        self.calls.append("synapse_register_commands")
        return (yield)

    @hookimpl(wrapper=True)
    def synapse_select_bucket(
        self, length: int, buckets: Sequence[int], model: ModelSpec
    ) -> Generator[None, Any, Any]:
        self.calls.append("synapse_select_bucket")
        return (yield)


class OldStyle:
    """The same with ``hookwrapper=True`` (pluggy's older wrappers)."""

    __name__ = "old-style-wrapper"

    def __init__(self) -> None:
        self.calls: list[str] = []

    @hookimpl(hookwrapper=True)
    def synapse_register_transports(
        self, register: Callable[[Transport], None]
    ) -> Generator[None, Any, None]:
        self.calls.append("synapse_register_transports")
        yield

    @hookimpl(hookwrapper=True)
    def synapse_register_commands(self, cli: click.Group) -> Generator[None, Any, None]:
        self.calls.append("synapse_register_commands")
        yield

    @hookimpl(hookwrapper=True)
    def synapse_select_bucket(
        self, length: int, buckets: Sequence[int], model: ModelSpec
    ) -> Generator[None, Any, None]:
        self.calls.append("synapse_select_bucket")
        yield


class Largest:
    """A plain bucket hook of its own: the largest bucket, always."""

    __name__ = "largest-bucket"

    @hookimpl
    def synapse_select_bucket(
        self, length: int, buckets: Sequence[int], model: ModelSpec
    ) -> int | None:
        return buckets[-1]


class Commands:
    __name__ = "commands"

    @hookimpl
    def synapse_register_commands(self, cli: click.Group) -> None:
        cli.add_command(click.Command("hello"))


Wrapper = NewStyle | OldStyle
Spec = Callable[[PluginHost], ModelSpec]


@pytest.fixture(params=[NewStyle, OldStyle])
def wrapper(request: pytest.FixtureRequest) -> Wrapper:
    made: Wrapper = request.param()
    return made


@pytest.fixture
def spec(make_config: Callable[..., HostConfig], make_model: Callable[..., Any]) -> Spec:
    """The spec of a model on the fake transport, read through ``plugins``."""
    config = make_config(make_model("m"))  # buckets 8, 16, 32
    return lambda plugins: Catalog(config, plugins).entry("m", "embed").spec


def test_a_wrapper_of_the_registration_hook_wraps_each_plugins_call(wrapper: Wrapper) -> None:
    plugins = PluginHost(
        [
            transport_plugin(InProcessFakeTransport("one")),
            transport_plugin(InProcessFakeTransport("two")),
            wrapper,
        ]
    )
    assert sorted(plugins.transports()) == ["one", "two"]
    assert wrapper.calls == ["synapse_register_transports"] * 2
    assert plugins.problems == []


def test_a_wrapper_of_the_commands_hook_runs(wrapper: Wrapper) -> None:
    plugins = PluginHost([Commands(), wrapper])
    cli = click.Group("synapse")
    plugins.register_commands(cli)
    assert "hello" in cli.commands
    assert wrapper.calls == ["synapse_register_commands"]


def test_a_bucket_wrapper_runs_around_synapse_s_own_hook(wrapper: Wrapper, spec: Spec) -> None:
    plugins = PluginHost([transport_plugin(InProcessFakeTransport()), wrapper])
    select = plugins.bucket_selector(BUCKETS, spec(plugins))
    wrapper.calls.clear()  # the catalog collected transports
    assert [select(5), select(5), select(9)] == [8, 8, 16]
    # Each choice asked of the hook: a wrapper may depend on more than the length.
    assert wrapper.calls == ["synapse_select_bucket"] * 3


def test_a_bucket_wrapper_runs_around_a_plugins_own_hook(wrapper: Wrapper, spec: Spec) -> None:
    plugins = PluginHost([transport_plugin(InProcessFakeTransport()), Largest(), wrapper])
    select = plugins.bucket_selector(BUCKETS, spec(plugins))
    wrapper.calls.clear()  # the catalog collected transports
    assert [select(5), select(9)] == [32, 32]
    assert wrapper.calls == ["synapse_select_bucket"] * 2


def test_a_wrapper_registered_after_a_selector_was_made_runs_in_it(spec: Spec) -> None:
    plugins = PluginHost([transport_plugin(InProcessFakeTransport())])
    model = spec(plugins)
    select = plugins.bucket_selector(BUCKETS, model)
    assert select(5) == 8
    wrapper = NewStyle()
    plugins.add(wrapper)
    assert select(5) == 8
    assert plugins.bucket_selector(BUCKETS, model)(9) == 16
    assert wrapper.calls == ["synapse_select_bucket"] * 2
