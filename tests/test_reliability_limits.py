"""Durations and deadlines that would make a bound unbounded are refused up front."""

from __future__ import annotations

import math
from typing import Any

import pytest
from click.testing import CliRunner

import synapse_core as synapse
from synapse_core.cli import make_cli
from synapse_core.errors import ConfigError
from synapse_core.testing import catalog_toml, transport_plugin
from synapse_core.testing.fake import InProcessFakeTransport


@pytest.mark.parametrize(
    ("setting", "path", "what"),
    [
        ({"exit_grace_s": math.inf}, "exit_grace_s", "finite number of seconds, got inf"),
        ({"exchange_timeout_s": math.inf}, "exchange_timeout_s", "finite number"),
        ({"restart_budget": {"window_s": math.inf}}, "restart_budget.window_s", "finite number"),
        ({"exit_grace_s": -math.inf}, "exit_grace_s", "greater than 0, got -inf"),
        ({"exchange_timeout_s": math.nan}, "exchange_timeout_s", "greater than 0, got nan"),
    ],
)
def test_infinite_or_nan_durations_are_refused_with_their_path(
    setting: dict[str, Any], path: str, what: str
) -> None:
    text = catalog_toml(**setting)
    # TOML spells them inf and nan; catalog_toml writes JSON numbers, which TOML lacks.
    text = text.replace("Infinity", "inf").replace("NaN", "nan")
    with pytest.raises(ConfigError) as info:
        synapse.HostConfig.from_toml_text(text, source="c.toml")
    [problem] = info.value.problems
    assert problem.startswith(f"{path}: must be ")
    assert what in problem


def test_an_infinite_duration_given_in_code_is_refused() -> None:
    with pytest.raises(ValueError, match="finite number of seconds, got inf"):
        synapse.HostConfig(exit_grace_s=math.inf)


def test_finite_durations_are_still_accepted() -> None:
    config = synapse.HostConfig.from_toml_text(
        "exit_grace_s = 0.001\nexchange_timeout_s = 1e6\n", source="c.toml"
    )
    assert (config.exit_grace_s, config.exchange_timeout_s) == (0.001, 1e6)


def test_a_nan_deadline_is_refused_when_it_is_made() -> None:
    with pytest.raises(ValueError, match="deadline must be a number of seconds, got nan"):
        synapse.Deadline.after(math.nan)
    with pytest.raises(ValueError, match="nan"):
        synapse.Deadline(math.nan)


@pytest.mark.anyio
async def test_a_nan_deadline_sends_nothing_to_the_worker(
    make_model: Any, make_config: Any
) -> None:
    transport = InProcessFakeTransport()
    cfg = make_config(make_model("m"))
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        await host.load("m")
        with pytest.raises(ValueError, match="nan"):
            await host.embed("m", ["x"], deadline=synapse.Deadline.after(math.nan))
    assert transport.frames("admit") == [] and transport.frames("infer") == []


@pytest.mark.parametrize("value", ["nan", "NaN", "-nan"])
def test_cli_deadline_nan_is_a_usage_error(value: str) -> None:
    result = CliRunner().invoke(
        make_cli(), ["embed", "m", "x", "--deadline", value], env={"SYNAPSE_PLUGINS": ""}
    )
    assert result.exit_code == 2
    assert "--deadline" in result.stderr and "not a number of seconds" in result.stderr
