"""Mock options are checked when the catalog opens, not when a worker trips on them."""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from synapse_core import ConfigError, HostConfig, PluginHost
from synapse_core.catalog import Catalog
from synapse_core.cli import make_cli
from synapse_core.testing import catalog_toml, model_entry, transport_plugin
from synapse_mock_transport import parse_options
from synapse_mock_transport.inprocess import InProcessTransport
from synapse_mock_transport.transport import MockTransport

#: model ``m`` with the given mock options
entry = functools.partial(model_entry, "m", package="p", ceiling=64)


#: each bad option and the start of the problem it must give (path first)
BAD: list[tuple[dict[str, Any], str]] = [
    ({"dims": 0}, "options.dims: must be greater than 0"),
    ({"dims": -3}, "options.dims: must be greater than 0"),
    ({"max_batch": 0}, "options.max_batch: must be greater than 0"),
    ({"faults": {"reply_delay_s": -1.0}}, "options.faults.reply_delay_s: must be a finite"),
    ({"faults": {"cold_admit_delay_s": math.nan}}, "options.faults.cold_admit_delay_s: must be"),
    ({"faults": {"reply_delay_s": math.inf}}, "options.faults.reply_delay_s: must be a finite"),
    ({"faults": {"crash_on_infer": 0}}, "options.faults.crash_on_infer: counts"),
    ({"faults": {"only_generation": -1}}, "options.faults.only_generation: "),
]


@pytest.mark.parametrize(("options", "problem"), BAD)
def test_bad_mock_options_are_refused_when_the_catalog_opens(
    options: dict[str, Any], problem: str
) -> None:
    config = HostConfig.from_dict({"models": [entry(**options)]}, source="c.toml")
    for transport in (MockTransport(), InProcessTransport()):
        with pytest.raises(ConfigError) as info:
            Catalog(config, PluginHost([transport_plugin(transport)]))
        assert info.value.source == "c.toml"
        assert any(p.startswith(f"models[0].{problem}") for p in info.value.problems), (
            info.value.problems
        )


def test_a_trace_path_that_is_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        parse_options({"trace": str(tmp_path)})
    (problem,) = info.value.problems
    assert problem.startswith("options.trace: ") and "file to append to" in problem


def test_a_trace_path_in_a_missing_directory_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "absent" / "trace.jsonl"
    with pytest.raises(ConfigError) as info:
        parse_options({"trace": str(path)})
    (problem,) = info.value.problems
    assert problem == f"options.trace: directory {path.parent} does not exist"


def test_good_options_still_open(tmp_path: Path) -> None:
    options = parse_options(
        {
            "dims": 1,
            "max_batch": 1,
            "trace": str(tmp_path / "t.jsonl"),
            "faults": {"reply_delay_s": 0, "crash_on_infer": 1, "only_generation": 1},
        }
    )
    assert options.dims == 1 and options.faults.crash_on_infer == 1


def test_synapse_catalog_exits_2_naming_the_bad_option(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(catalog_toml(entry(dims=0, max_batch=0)), encoding="utf-8")
    env = {"SYNAPSE_PLUGINS": "mock", "SYNAPSE_CATALOG": None, "SYNAPSE_DEBUG": None}
    result = CliRunner().invoke(make_cli(), ["catalog", "--catalog", str(path)], env=env)
    assert result.exit_code == 2
    assert "models[0].options.dims: must be greater than 0, got 0" in result.stderr


def test_every_bad_mock_option_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as info:
        parse_options({"dims": 0, "max_batch": 0, "faults": {"reply_delay_s": -1}})
    assert [p.split(":")[0] for p in info.value.problems] == [
        "options.dims",
        "options.max_batch",
        "options.faults.reply_delay_s",
    ]
