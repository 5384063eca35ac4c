"""Plugin discovery through the ``synapse`` entry-point group, and broken plugins.

Entry points are faked: ``importlib.metadata.entry_points`` is replaced by one
returning real :class:`~importlib.metadata.EntryPoint` objects that point at
the modules in ``plugin_fixtures``, so nothing installed is ever loaded.
"""

from __future__ import annotations

import importlib.metadata as md
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from synapse_core import plugins as plugins_module
from synapse_core.catalog import Catalog, default_config
from synapse_core.config import HostConfig, ModelSpec
from synapse_core.errors import Refused
from synapse_core.hookspecs import hookimpl
from synapse_core.opening import open_host
from synapse_core.plugins import ENTRY_POINT_GROUP, PluginHost, PluginInfo
from synapse_core.testing import host_config, model_entry, transport_plugin
from synapse_core.testing.fake import InProcessFakeTransport
from synapse_core.transport import Availability, Transport

FIXTURES = "plugin_fixtures"

Install = Callable[..., None]


def entry_point(name: str, module: str) -> md.EntryPoint:
    return md.EntryPoint(name=name, value=f"{FIXTURES}.{module}", group=ENTRY_POINT_GROUP)


GOOD = entry_point("good", "good_plugin")
BROKEN = entry_point("broken", "raises_on_import")
TYPO = entry_point("typo", "misspelled_hook")
BAD_SIGNATURE = entry_point("badsig", "bad_signature")
# The same name again (editable installs can list an entry point twice).
DUPLICATE = entry_point("good", "raises_on_import")
ALL = (GOOD, BROKEN, TYPO, BAD_SIGNATURE, DUPLICATE)


@pytest.fixture
def install(monkeypatch: pytest.MonkeyPatch) -> Iterator[Install]:
    """Make ``entry_points(group="synapse")`` return the given entry points."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    monkeypatch.delenv(plugins_module.ENV_SELECT, raising=False)
    asked: list[str] = []

    def set_installed(*eps: md.EntryPoint) -> None:
        def entry_points(*, group: str) -> md.EntryPoints:
            asked.append(group)
            return md.EntryPoints(ep for ep in eps if ep.group == group)

        # plugins.py calls ``md.entry_points(group=...)`` on importlib.metadata itself.
        monkeypatch.setattr(md, "entry_points", entry_points)

    set_installed()
    yield set_installed
    assert set(asked) <= {ENTRY_POINT_GROUP}
    for name in [m for m in sys.modules if m == FIXTURES or m.startswith(FIXTURES + ".")]:
        del sys.modules[name]


def info(host: PluginHost, name: str) -> PluginInfo:
    [found] = [i for i in host.infos if i.name == name]
    return found


def test_discovery_loads_a_good_plugin(install: Install) -> None:
    install(GOOD)
    host = PluginHost(load_entry_points=True)
    assert host.problems == []
    assert info(host, "good").hooks == ["synapse_register_transports"]
    assert info(host, "good").error == ""
    transports = host.transports()
    assert list(transports) == ["mock"]
    assert transports["mock"].plugin == "good"
    assert transports["mock"].availability == Availability.yes()
    assert isinstance(transports["mock"].transport, InProcessFakeTransport)


def test_entry_points_are_not_loaded_unless_asked(install: Install) -> None:
    install(GOOD, BROKEN)
    host = PluginHost()
    assert host.infos == [] and host.problems == []
    assert host.transports() == {}


def test_broken_plugins_are_reported_by_name(install: Install) -> None:
    install(*ALL)
    host = PluginHost(load_entry_points=True)
    # The duplicate name is skipped: the first "good" wins, the second is not imported.
    assert [i.name for i in host.infos] == ["good", "broken", "typo", "badsig"]
    assert info(host, "good").error == ""
    assert info(host, "broken").error == (
        f"failed to import {FIXTURES}.raises_on_import: "
        "RuntimeError: plugin fixture refuses to import"
    )
    assert info(host, "typo").error == "unknown hooks (misspelled?): synapse_register_transport"
    assert info(host, "badsig").error.startswith("invalid hook implementation: ")
    assert "lane" in info(host, "badsig").error
    assert len(host.problems) == 3
    for name in ("broken", "typo", "badsig"):
        assert sum(p.startswith(f"plugin {name!r}: ") for p in host.problems) == 1
    # Nothing of the broken plugins is registered.
    assert [i.hooks for i in host.infos[1:]] == [[], [], []]
    assert list(host.transports()) == ["mock"]
    assert len(host.problems) == 3


@pytest.mark.anyio
async def test_the_host_serves_through_the_good_plugin_beside_broken_ones(
    install: Install,
) -> None:
    install(*ALL)
    plugin_host = PluginHost(load_entry_points=True)
    async with open_host(default_config(), plugins=plugin_host) as host:
        result = await host.embed("mini-a", ["one", "two words"])
        scores = await host.rerank("rr", "query", ["doc"])
    assert len(result.vectors) == 2
    assert len(scores.scores) == 1
    mock = plugin_host.transports()["mock"].transport
    assert isinstance(mock, InProcessFakeTransport)
    assert sorted(r.model for r in mock.launches) == ["mini-a", "rr"]


@pytest.mark.parametrize(
    ("selection", "loaded"),
    [
        ("good", ["good"]),
        (" typo , good ", ["good", "typo"]),
        ("good,nonexistent", ["good"]),
        ("", []),
        (" , ", []),
    ],
    ids=["one", "spaces", "unknown-name", "empty", "blank-items"],
)
def test_synapse_plugins_limits_loading(
    install: Install, monkeypatch: pytest.MonkeyPatch, selection: str, loaded: list[str]
) -> None:
    install(*ALL)
    monkeypatch.setenv("SYNAPSE_PLUGINS", selection)
    host = PluginHost(load_entry_points=True)
    assert [i.name for i in host.infos] == loaded
    # The broken plugin was never selected, so it was never imported.
    assert not any("broken" in p for p in host.problems)
    assert f"{FIXTURES}.raises_on_import" not in sys.modules
    assert ("mock" in host.transports()) == ("good" in loaded)


def test_synapse_plugins_can_select_a_broken_plugin(
    install: Install, monkeypatch: pytest.MonkeyPatch
) -> None:
    install(*ALL)
    monkeypatch.setenv("SYNAPSE_PLUGINS", "broken")
    host = PluginHost(load_entry_points=True)
    assert [i.name for i in host.infos] == ["broken"]
    assert host.problems == [f"plugin 'broken': {info(host, 'broken').error}"]
    assert host.transports() == {}


# -- the core alone -------------------------------------------------------------------


def _refusal_says_no_transport(error: Refused, model: str) -> None:
    assert error.code == "transport-unavailable"
    assert error.model == model
    assert error.index is None
    assert f"no installed transport provides model {model!r}" in error.message
    assert "SYNAPSE_PLUGINS" in error.message


def test_the_core_alone_reports_no_transports() -> None:
    host = PluginHost()
    assert host.transports() == {}
    assert host.problems == []
    catalog = Catalog(default_config(), host)
    for entry in catalog.entries.values():
        assert not entry.available
        assert entry.transport is None


@pytest.mark.anyio
@pytest.mark.parametrize("how", ["no-plugins", "empty-selection"])
async def test_the_core_alone_refuses_mock_models(
    install: Install, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    if how == "no-plugins":
        plugin_host = PluginHost([])
    else:
        install(GOOD)
        monkeypatch.setenv("SYNAPSE_PLUGINS", "")
        plugin_host = PluginHost(load_entry_points=True)
    async with open_host(default_config(), plugins=plugin_host) as host:
        with pytest.raises(Refused) as embed_error:
            await host.embed("mini-a", ["hello"])
        with pytest.raises(Refused) as rerank_error:
            await host.rerank("rr", "q", ["d"])
        with pytest.raises(Refused) as unknown:
            await host.embed("no-such-model", ["hello"])
        assert host.supervisors == {}  # refused before any lane or worker existed
        assert host.worker("mini-a") is None
    _refusal_says_no_transport(embed_error.value, "mini-a")
    _refusal_says_no_transport(rerank_error.value, "rr")
    assert unknown.value.code == "unknown-model"


# -- misbehaving transports and hooks ---------------------------------------------------


class ProbeExplodes(Transport):
    name = "flaky"

    def availability(self) -> Availability:
        raise RuntimeError("probe exploded")


class NotHere(Transport):
    name = "elsewhere"

    def availability(self) -> Availability:
        return Availability.no("needs a device this machine does not have")


class CatalogExplodes(Transport):
    name = "shipper"

    def catalog_models(self) -> Sequence[ModelSpec]:
        raise OSError("catalog file missing")


def _config(*transports: str) -> HostConfig:
    return host_config(
        *(model_entry(f"m-{t}", transport=t, package="p", ceiling=64) for t in transports)
    )


@pytest.mark.anyio
async def test_an_availability_probe_that_raises_is_reported_unavailable() -> None:
    plugin_host = PluginHost([transport_plugin(ProbeExplodes(), InProcessFakeTransport())])
    availability = plugin_host.transports()["flaky"].availability
    assert not availability.available
    assert "availability probe failed" in availability.reason
    assert "probe exploded" in availability.reason
    async with open_host(_config("flaky", "fake"), plugins=plugin_host) as host:
        with pytest.raises(Refused) as error:
            await host.embed("m-flaky", ["x"])
        # The other transport still serves.
        assert len((await host.embed("m-fake", ["x"])).vectors) == 1
    assert error.value.code == "transport-unavailable"
    assert "transport 'flaky' cannot run here" in error.value.message
    assert "probe exploded" in error.value.message


@pytest.mark.anyio
async def test_an_unavailable_transport_refuses_with_its_reason() -> None:
    async with open_host(_config("elsewhere"), plugins=[transport_plugin(NotHere())]) as host:
        with pytest.raises(Refused) as error:
            await host.embed("m-elsewhere", ["x"])
    assert error.value.code == "transport-unavailable"
    assert "needs a device this machine does not have" in error.value.message


def test_a_failing_catalog_models_is_reported_and_skipped() -> None:
    plugin_host = PluginHost([transport_plugin(CatalogExplodes())])
    catalog = Catalog(_config("shipper"), plugin_host)
    assert catalog.entries["m-shipper"].available
    assert any("catalog_models failed" in p and "shipper" in p for p in plugin_host.problems)


class _RaisingRegistrar:
    __name__ = "raising-registrar"

    @hookimpl
    def synapse_register_transports(self, register: Callable[[Transport], None]) -> None:
        register(NotHere())
        raise RuntimeError("registration broke halfway")


def test_a_registration_hook_that_raises_is_reported_by_name() -> None:
    plugin_host = PluginHost([_RaisingRegistrar(), transport_plugin(InProcessFakeTransport())])
    assert list(plugin_host.transports()) == ["fake"]
    [problem] = plugin_host.problems
    assert problem.startswith("plugin 'raising-registrar': synapse_register_transports failed")
    assert "registration broke halfway" in problem


def test_a_second_transport_of_the_same_name_is_reported_and_ignored() -> None:
    early, late = InProcessFakeTransport(), InProcessFakeTransport()
    plugin_host = PluginHost()
    plugin_host.add(transport_plugin(early), name="early")
    plugin_host.add(transport_plugin(late), name="late")
    # "First" is pluggy's call order: plugins registered later are asked first.
    winner = plugin_host.transports()["fake"]
    assert winner.transport is late and winner.plugin == "late"
    [problem] = plugin_host.problems
    assert "plugin 'early'" in problem and "already provided by 'late'" in problem


def test_an_invalid_plugin_object_is_recorded_not_raised() -> None:
    class Typo:
        __name__ = "typo-object"

        @hookimpl
        def synapse_observe_event(self, event: object) -> None:
            pass

    plugin_host = PluginHost([Typo()])
    assert plugin_host.infos[0].error == "unknown hooks (misspelled?): synapse_observe_event"
    assert not plugin_host.observing


# -- an author's mistakes, each named --------------------------------------------


class _Unmarked:
    __name__ = "unmarked"

    def synapse_register_transports(self, register: Callable[[Transport], None]) -> None:
        register(InProcessFakeTransport())


class _Returning:
    __name__ = "returning"

    @hookimpl
    def synapse_register_transports(self, register: Callable[[Transport], None]) -> list[object]:
        return [InProcessFakeTransport()]


class _Nameless(Transport):
    pass


class _Registering:
    """Registers whatever it is given, as a plugin with a mistake would."""

    __name__ = "registering"

    def __init__(self, *registered: object) -> None:
        self.registered = registered

    @hookimpl
    def synapse_register_transports(self, register: Callable[[object], None]) -> None:
        for item in self.registered:
            register(item)


def test_a_hook_function_not_marked_as_an_implementation_is_reported() -> None:
    plugin_host = PluginHost([_Unmarked()])
    assert plugin_host.transports() == {}
    assert plugin_host.problems == [
        "plugin 'unmarked': synapse_register_transports is not marked with @hookimpl "
        "(synapse_core.plugin.hookimpl), so it is never called"
    ]


def test_a_registration_hook_that_returns_its_transports_is_told_to_register_them() -> None:
    plugin_host = PluginHost([_Returning()])
    assert plugin_host.transports() == {}
    [problem] = plugin_host.problems
    assert problem.startswith("plugin 'returning': synapse_register_transports returned [<")
    assert problem.endswith(
        "; call register(...) with each instead (what a hook returns is not registered)"
    )


@pytest.mark.parametrize(
    ("registered", "said"),
    [
        (
            InProcessFakeTransport,
            "registered the class InProcessFakeTransport, not an instance: "
            "register(InProcessFakeTransport())",
        ),
        ("fake", "registered 'fake', which is not a synapse_core.plugin.Transport"),
        (_Nameless(), "_Nameless has no name: set its class attribute name"),
    ],
)
def test_what_is_not_a_named_transport_instance_is_reported_and_ignored(
    registered: object, said: str
) -> None:
    plugin_host = PluginHost([_Registering(registered, InProcessFakeTransport())])
    assert list(plugin_host.transports()) == ["fake"]
    assert plugin_host.problems == [f"plugin 'registering': {said}; ignored"]


class _Answers(Transport):
    """A transport whose probe and lane are whatever it is given."""

    def __init__(self, name: str, availability: object = None, lane: object = None) -> None:
        self.name = name
        self._availability, self._lane = availability, lane

    def availability(self) -> Availability:
        return self._availability if self._availability is not None else Availability.yes()  # type: ignore[return-value]

    def lane_for(self, model: ModelSpec) -> Any:
        return self._lane if self._lane is not None else super().lane_for(model)


def test_a_probe_or_lane_of_the_wrong_type_makes_the_model_unavailable_not_the_host() -> None:
    probe, lane = _Answers("probe", availability=True), _Answers("lane", lane="lane-0")
    plugin_host = PluginHost([transport_plugin(probe, lane, InProcessFakeTransport())])
    reason = plugin_host.transports()["probe"].availability.reason
    assert reason.startswith("availability() returned True, not an Availability")
    catalog = Catalog(_config("probe", "lane", "fake"), plugin_host)
    assert "returned True, not an Availability" in catalog.entries["m-probe"].problem
    assert catalog.entries["m-lane"].problem == (
        "transport 'lane': lane_for returned 'lane-0', not a LaneInfo"
    )
    assert catalog.entries["m-fake"].available


def test_an_entry_point_in_a_group_synapse_does_not_read_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Dist:
        entry_points = (
            md.EntryPoint(name="digest", value="digest.plugin", group="synapse.transports"),
            md.EntryPoint(name="app", value="digest.app:make", group="synapse.apps"),
            md.EntryPoint(name="chosen", value="other.plugin", group="synapse.extras"),
            md.EntryPoint(name="Big", value="big.plugin", group="Synapse"),
            md.EntryPoint(name="pip", value="pip._internal.cli.main:main", group="console_scripts"),
        )

    # An editable install can list a distribution twice: each entry point is named once.
    monkeypatch.setattr(md, "distributions", lambda: [Dist(), Dist()])
    where = "not 'synapse', the group Synapse loads plugins from"
    assert plugins_module._misplaced({"chosen", "pip"}, set()) == [
        f"entry point 'digest' (digest.plugin) is in group 'synapse.transports', {where}",
        f"entry point 'chosen' (other.plugin) is in group 'synapse.extras', {where}",
        f"entry point 'Big' (big.plugin) is in group 'Synapse', {where}",
    ]
    assert plugins_module._misplaced(None, {"digest", "Big"}) == []


def test_a_transport_that_cannot_start_a_worker_is_reported_when_registered() -> None:
    """Found by ``synapse plugins``, not at a model's first call."""
    plugin_host = PluginHost([transport_plugin(NotHere(), InProcessFakeTransport())])
    assert set(plugin_host.transports()) == {"elsewhere", "fake"}  # still listed
    assert plugin_host.problems == [
        "plugin 'test-transports:elsewhere,fake': transport 'elsewhere' sets no worker and "
        "does not override launch: its models cannot start"
    ]


class _Raises(Transport):
    """A transport whose ``lane_for`` or ``tokenizer`` raises."""

    worker = "unused:Worker"

    def __init__(self, name: str, method: str) -> None:
        self.name, self.method = name, method

    def lane_for(self, model: ModelSpec) -> Any:
        if self.method == "lane_for":
            raise RuntimeError("no lane today")
        return super().lane_for(model)

    def tokenizer(self, model: ModelSpec) -> Any:
        if self.method == "tokenizer":
            raise RuntimeError("no vocabulary")
        return super().tokenizer(model)


def test_a_lane_or_tokenizer_that_raises_makes_the_model_unavailable_not_the_catalog() -> None:
    plugin_host = PluginHost(
        [transport_plugin(_Raises("lane", "lane_for"), _Raises("tok", "tokenizer"))]
    )
    catalog = Catalog(_config("lane", "tok"), plugin_host)
    assert catalog.entries["m-lane"].problem == (
        "transport 'lane': lane_for failed: RuntimeError('no lane today')"
    )
    assert catalog.entries["m-tok"].problem == (
        "transport 'tok': tokenizer failed: RuntimeError('no vocabulary')"
    )
