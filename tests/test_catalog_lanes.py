"""``[lanes."id"]`` settings must name a lane some model of the catalog runs on."""

from __future__ import annotations

from typing import Any

import pytest

from synapse_core import HostConfig
from synapse_core.catalog import Catalog
from synapse_core.errors import ConfigError
from synapse_core.plugins import PluginHost
from synapse_core.testing import model_entry, transport_plugin
from synapse_core.transport import LaneInfo, Transport


class LaneTransport(Transport):
    """A transport whose models all run on one lane (never launched here)."""

    def __init__(self, name: str, lane: str) -> None:
        self.name = name
        self.lane = LaneInfo(lane, capacity=100)

    def lane_for(self, model: Any) -> LaneInfo:
        return self.lane


def model(name: str, transport: str) -> dict[str, Any]:
    return model_entry(name, transport=transport, package="p", ceiling=8)


def catalog(lanes: dict[str, Any], *models: dict[str, Any]) -> Catalog:
    config = HostConfig.from_dict({"models": list(models), "lanes": lanes}, source="c.toml")
    plugins = PluginHost(
        [transport_plugin(LaneTransport("t", "dev:0"), LaneTransport("u", "dev:1"))]
    )
    return Catalog(config, plugins)


def test_a_lane_setting_naming_no_lane_is_refused() -> None:
    with pytest.raises(ConfigError) as info:
        catalog({"x:9": {"capacity": 5}, "dev:0": {"capacity": 5}}, model("a", "t"))
    assert info.value.source == "c.toml"
    assert info.value.problems == [
        "lanes['x:9']: no model of the catalog runs on lane 'x:9' (its lanes: dev:0)"
    ]


def test_every_unknown_lane_is_named() -> None:
    with pytest.raises(ConfigError) as info:
        catalog({"dev0": {}, "dev:1": {}}, model("a", "t"))
    assert info.value.problems == [
        "lanes['dev0']: no model of the catalog runs on lane 'dev0' (its lanes: dev:0)",
        "lanes['dev:1']: no model of the catalog runs on lane 'dev:1' (its lanes: dev:0)",
    ]


def test_lane_settings_of_the_catalogs_lanes_are_accepted() -> None:
    opened = catalog({"dev:0": {"capacity": 5}, "dev:1": {}}, model("a", "t"), model("b", "u"))
    assert opened.config.lanes["dev:0"].capacity == 5


def test_lanes_of_a_transport_that_is_not_installed_cannot_be_checked() -> None:
    # Its models stay in the catalog (refused when called), and their lanes
    # are unknown here: a catalog shared with machines that have the plugin opens.
    opened = catalog({"other:0": {"capacity": 5}}, model("a", "t"), model("z", "absent"))
    assert opened.entries["z"].problem
