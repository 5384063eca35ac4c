"""Host configuration: defaults, and errors that name the path of the bad field."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import attrs
import cattrs
import pytest

from synapse_core import DEFAULT_CATALOG_SOURCE, default_catalog_text
from synapse_core.catalog import Catalog, default_config
from synapse_core.config import (
    HostConfig,
    LaneConfig,
    ModelSpec,
    RestartBudget,
    structuring_problems,
)
from synapse_core.errors import ConfigError
from synapse_core.plugins import PluginHost
from synapse_core.testing import catalog_toml, host_config, model_entry, transport_plugin
from synapse_core.testing.fake import FakeTransport

MODEL: dict[str, Any] = {
    "name": "a",
    "task": "embed",
    "transport": "fake",
    "package": "pkg",
    "ceiling": 128,
}


def model(**changes: Any) -> dict[str, Any]:
    return {**MODEL, **changes}


def problems_of(text: str, source: str = "catalog.toml") -> list[str]:
    with pytest.raises(ConfigError) as info:
        HostConfig.from_toml_text(text, source=source)
    error = info.value
    assert error.source == source
    assert error.code == "bad-config"
    # The message carries the source and every problem, for users who only see str().
    assert str(error).startswith(f"invalid configuration in {source}: ")
    for problem in error.problems:
        assert problem in str(error)
    return error.problems


def test_a_catalog_with_only_models_gets_every_default() -> None:
    config = HostConfig.from_toml_text(catalog_toml(MODEL), source="mine.toml")
    assert config.models == (ModelSpec("a", "embed", "fake", "pkg", 128),)
    assert config.models[0].options == {}
    assert config == HostConfig(models=config.models)
    assert config.exchange_timeout_s == 30.0
    assert config.max_concurrent == 64
    assert config.max_waiting == 1024
    assert config.exit_grace_s == 5.0
    assert config.restart_budget == RestartBudget(max_restarts=5, window_s=60.0)
    assert config.certify_observation is False
    assert config.lanes == {}
    assert config.max_frame_bytes == 64 * 1024 * 1024
    assert config.source == "mine.toml"


def test_an_empty_catalog_is_valid() -> None:
    assert HostConfig.from_toml_text("").models == ()


def test_settings_and_lanes_are_read() -> None:
    text = catalog_toml(
        model(options={"dims": 8}), exchange_timeout_s=1.5, certify_observation=True
    )
    text += '[lanes."fake:0"]\ncapacity = 5000\n[restart_budget]\nmax_restarts = 2\n'
    config = HostConfig.from_toml_text(text)
    assert config.exchange_timeout_s == 1.5
    assert config.certify_observation is True
    assert config.lanes == {"fake:0": LaneConfig(5000)}
    assert config.restart_budget == RestartBudget(max_restarts=2, window_s=60.0)
    assert config.models[0].options == {"dims": 8}


def test_the_shipped_default_catalog_loads() -> None:
    config = default_config()
    assert config.source == DEFAULT_CATALOG_SOURCE == "synapse_core/default_catalog.toml"
    assert config == HostConfig.from_toml_text(default_catalog_text())
    names = [m.name for m in config.models]
    assert names == ["minilm", "minilm-rerank", "mini-a", "mini-b", "rr"]
    # Two entries of one package: two separate workers.
    assert config.model("mini-a").package == config.model("mini-b").package  # type: ignore[union-attr]
    assert config.model("rr").task == "rerank"  # type: ignore[union-attr]
    assert config.model("minilm-rerank").task == "rerank"  # type: ignore[union-attr]
    # The fake transport stands in for the mock plugin the shipped entries name.
    catalog = Catalog(config, PluginHost([transport_plugin(FakeTransport("mock"))]))
    entries = catalog.entries
    assert all(entries[name].available for name in ("mini-a", "mini-b", "rr"))
    # Without the cpu plugin, the real model is listed with what to install.
    assert "transport 'cpu'" in entries["minilm"].problem
    assert "install its plugin" in entries["minilm"].problem


def test_model_lookup_and_with_models() -> None:
    config = HostConfig.from_toml_text(catalog_toml(MODEL))
    assert config.model("a") is config.models[0]
    assert config.model("missing") is None
    extra = (ModelSpec("a", "rerank", "x", "y", 1), ModelSpec("b", "rerank", "x", "y", 1))
    merged = config.with_models(extra)
    # A user's entry wins over a contributed one of the same name.
    assert [(m.name, m.task) for m in merged.models] == [("a", "embed"), ("b", "rerank")]


def test_wrong_type_names_the_indexed_field() -> None:
    text = catalog_toml(MODEL, model(name="b"), model(name="c", ceiling="big"))
    assert problems_of(text) == ["models[2].ceiling: expected int, got 'big'"]


def test_every_bad_field_is_listed() -> None:
    text = catalog_toml(model(ceiling="big"), model(name="b", task=3, ceiling=[1]))
    problems = problems_of(text)
    assert "models[0].ceiling: expected int, got 'big'" in problems
    assert any(p.startswith("models[1].task: ") for p in problems)
    assert "models[1].ceiling: expected int, got [1]" in problems
    assert len(problems) == 3


@pytest.mark.parametrize(
    ("text", "path"),
    [
        (catalog_toml(model(ceiling=1.5)), "models[0].ceiling"),
        (catalog_toml(model(ceiling=True)), "models[0].ceiling"),
        (catalog_toml(model(package=[1])), "models[0].package"),
        (catalog_toml(MODEL, certify_observation="false"), "certify_observation"),
        (catalog_toml(MODEL, max_concurrent="7"), "max_concurrent"),
    ],
    ids=["float-ceiling", "bool-ceiling", "list-package", "string-bool", "string-int"],
)
def test_values_of_the_wrong_type_are_refused_not_coerced(text: str, path: str) -> None:
    problems = problems_of(text)
    assert any(path in p for p in problems)


def test_missing_field_is_named() -> None:
    text = catalog_toml({k: v for k, v in MODEL.items() if k != "package"})
    assert problems_of(text) == ["models[0].package: required field missing"]


def test_unknown_top_level_key_is_named() -> None:
    [problem] = problems_of(catalog_toml(MODEL, exchange_timeout=3))
    assert "extra fields found (exchange_timeout)" in problem


def test_unknown_model_key_is_named_with_its_model() -> None:
    [problem] = problems_of(catalog_toml(MODEL, model(name="b", colour="red")))
    assert problem == "models[1]: extra fields found (colour)"


def test_unknown_nested_key_is_named() -> None:
    [problem] = problems_of("[restart_budget]\nmax_restart = 3\n")
    assert problem == "restart_budget: extra fields found (max_restart)"


def test_bad_task_literal_lists_the_choices() -> None:
    assert problems_of(catalog_toml(model(task="predict"))) == [
        "models[0].task: expected one of 'embed', 'rerank', 'classify'"
    ]


@attrs.frozen
class _Choices:
    mode: Literal["fast", "exact"] | None = None
    level: Literal["int8"] | None = None


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"mode": "slow"}, "mode: expected one of 'fast', 'exact', or leave the key out"),
        ({"level": "int4"}, "level: expected 'int8', or leave the key out"),
    ],
)
def test_an_optional_literal_says_its_values_as_a_user_writes_them(
    given: dict[str, str], said: str
) -> None:
    converter = cattrs.Converter(forbid_extra_keys=True)
    with pytest.raises(Exception) as info:
        converter.structure(given, _Choices)
    assert structuring_problems(info.value) == [said]


@pytest.mark.parametrize(
    ("text", "where", "what"),
    [
        (catalog_toml(model(ceiling=0)), "models[0].ceiling", "must be greater than 0, got 0"),
        (catalog_toml(model(ceiling=-3)), "models[0].ceiling", "must be greater than 0, got -3"),
        (
            '[lanes."fake:0"]\ncapacity = 0\n',
            "lanes['fake:0'].capacity",
            "must be greater than 0, got 0",
        ),
        ("[restart_budget]\nwindow_s = 0\n", "restart_budget.window_s", "must be greater than 0"),
        (
            "[restart_budget]\nmax_restarts = -1\n",
            "restart_budget.max_restarts",
            "must be 0 or more",
        ),
        (catalog_toml(max_concurrent=0), "max_concurrent", "must be greater than 0"),
        (catalog_toml(exchange_timeout_s=-1.0), "exchange_timeout_s", "must be greater than 0"),
    ],
    ids=[
        "ceiling-0",
        "ceiling-negative",
        "lane-capacity",
        "window",
        "max-restarts",
        "max-concurrent",
        "timeout",
    ],
)
def test_validator_errors_name_where_and_what(text: str, where: str, what: str) -> None:
    [problem] = problems_of(text)
    assert problem.startswith(f"{where}: ")
    assert what in problem


def test_validator_errors_name_the_field_path() -> None:
    [problem] = problems_of(catalog_toml(model(ceiling=0)))
    assert problem.startswith("models[0].ceiling: ")


def test_duplicate_model_names_are_refused() -> None:
    text = catalog_toml(MODEL, model(package="other"), model(name="b"), model(name="b"))
    assert problems_of(text) == [
        "models[1].name: 'a' is already used by models[0]",
        "models[3].name: 'b' is already used by models[2]",
    ]


def test_invalid_toml_is_reported_with_its_source() -> None:
    [problem] = problems_of("[[models]]\nname = \n", source="broken.toml")
    assert problem.startswith("not valid TOML: ")
    assert "line 2" in problem


def test_unreadable_file_is_reported(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as info:
        HostConfig.from_toml(missing)
    assert info.value.source == str(missing)
    assert info.value.problems == ["cannot read file: No such file or directory"]
    with pytest.raises(ConfigError, match="cannot read file"):
        HostConfig.from_toml(tmp_path)  # a directory


def test_from_toml_reads_a_file_and_keeps_its_path(tmp_path: Path) -> None:
    path = tmp_path / "catalog.toml"
    path.write_text(catalog_toml(MODEL, max_waiting=3), encoding="utf-8")
    config = HostConfig.from_toml(path)
    assert config.source == str(path)
    assert config.max_waiting == 3
    path.write_text(catalog_toml(model(ceiling="x")), encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        HostConfig.from_toml(path)
    assert info.value.source == str(path)
    assert info.value.problems == ["models[0].ceiling: expected int, got 'x'"]


# -- transport options, checked through the catalog -----------------------------------


def catalog_problems(*models: dict[str, Any]) -> list[str]:
    config = HostConfig.from_toml_text(catalog_toml(*models), source="opts.toml")
    with pytest.raises(ConfigError) as info:
        Catalog(config, PluginHost([transport_plugin(FakeTransport())]))
    assert info.value.source == "opts.toml"
    return info.value.problems


def test_mock_option_errors_name_the_option_path() -> None:
    problems = catalog_problems(model(options={"faults": {"crash_on_infer": "twice"}}))
    assert problems == ["models[0].options.faults.crash_on_infer: expected int, got 'twice'"]


def test_mock_option_errors_name_the_right_model() -> None:
    problems = catalog_problems(
        MODEL, model(name="b", options={"dims": "wide"}), model(name="c", options={"speed": 1})
    )
    assert problems == [
        "models[1].options.dims: expected int, got 'wide'",
        "models[2].options: extra fields found (speed)",
    ]


def test_mock_options_of_another_transport_are_not_checked() -> None:
    config = HostConfig.from_toml_text(
        catalog_toml(MODEL, model(name="b", transport="elsewhere", options={"speed": 1}))
    )
    catalog = Catalog(config, PluginHost([transport_plugin(FakeTransport())]))
    assert catalog.entries["a"].available
    assert "no installed transport provides model 'b'" in catalog.entries["b"].problem


def test_model_entry_names_a_package_per_model_and_copies_its_defaults() -> None:
    defaults = {"buckets": [8, 16], "dims": 4}
    a = model_entry("a", defaults=defaults, dims=8)
    b = model_entry(
        "b", task="rerank", transport="fake", package="p", ceiling=16, defaults=defaults
    )
    assert a == {
        "name": "a",
        "task": "embed",
        "transport": "mock",
        "package": "pkg-a",
        "ceiling": 32,
        "options": {"buckets": [8, 16], "dims": 8},
    }
    assert (b["task"], b["transport"], b["package"], b["ceiling"]) == ("rerank", "fake", "p", 16)
    a["options"]["buckets"].append(32)
    assert b["options"]["buckets"] == defaults["buckets"] == [8, 16]


def test_host_config_reads_entries_as_a_catalog_file_is_read() -> None:
    config = host_config(model_entry("a", transport="fake", dims=4), exit_grace_s=2.0)
    assert config.models == (ModelSpec("a", "embed", "fake", "pkg-a", 32, {"dims": 4}),)
    assert config.exit_grace_s == 2.0
    with pytest.raises(ConfigError) as info:
        host_config(model_entry("a", ceiling=0), source="mine.toml")
    assert info.value.source == "mine.toml"
    assert info.value.problems[0].startswith("models[0].ceiling: ")


def test_prompts_are_read_by_name_and_a_bad_one_is_named_by_its_path() -> None:
    entry = {**model_entry("a"), "prompts": {"query": "query: ", "passage": "passage: "}}
    assert host_config(entry).models[0].prompts == {"query": "query: ", "passage": "passage: "}
    assert host_config(model_entry("a")).models[0].prompts == {}
    for prompts, problem in (
        ({"query": 3}, "models[0].prompts['query']: expected str"),
        ({" ": "x"}, "models[0].prompts: a prompt needs a name"),
        ("query: ", "models[0].prompts: expected a mapping"),
    ):
        with pytest.raises(ConfigError, match=re.escape(problem)):
            host_config({**model_entry("a"), "prompts": prompts})
