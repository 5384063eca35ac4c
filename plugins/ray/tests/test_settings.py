"""The application builder's arguments and catalog, checked where ``serve run`` runs."""

from __future__ import annotations

import importlib.metadata as md
from pathlib import Path

import attrs
import pytest
import yaml

from synapse_core import ConfigError, HostConfig, PluginError
from synapse_http.app import asgi_app
from synapse_http.settings import ServeSettings
from synapse_ray import app
from synapse_ray.deployment import http_app
from synapse_ray.settings import (
    LANE_RESOURCE,
    Settings,
    graceful_shutdown_s,
    read_catalog,
    settings_from_args,
    shutdown_bound_s,
)
from synapse_ray.testing import mock_model, write_catalog


def test_command_line_strings_become_numbers() -> None:
    settings = settings_from_args(
        {"num_replicas": "3", "max_models_per_replica": "2", "graceful_shutdown_timeout_s": "90"}
    )
    assert settings == Settings(
        num_replicas=3, max_models_per_replica=2, graceful_shutdown_timeout_s=90.0
    )
    assert settings_from_args({}).num_replicas is None  # Ray's default, or autoscaling


def test_http_settings_reach_the_app() -> None:
    settings = settings_from_args({"api_key": "k", "request_timeout_s": "5"})
    assert settings.http() == {"api_key": "k", "request_timeout_s": 5.0}
    # every option is a setting of synapse serve, which the http app refuses otherwise
    assert set(settings.http()) <= {field.name for field in attrs.fields(ServeSettings)}
    with pytest.raises(ConfigError, match="request_timeout_s: must be greater than 0"):
        settings_from_args({"request_timeout_s": "0"})


@pytest.mark.parametrize("key", ["", "   "])
def test_an_empty_api_key_is_refused_not_taken_as_no_key(key: str) -> None:
    """`serve run synapse_ray:app api_key=` would expect "Bearer " and nothing."""
    with pytest.raises(ConfigError) as caught:
        settings_from_args({"api_key": key})
    (problem,) = caught.value.problems
    assert problem.startswith("api_key: the key is empty, so clients would have to send")
    assert settings_from_args({}).api_key is None  # unset: no key, as synapse serve


def test_config_file_values_are_taken_as_they_are() -> None:
    assert settings_from_args({"num_replicas": 2, "lane_resource": "ane"}) == Settings(
        num_replicas=2, lane_resource="ane"
    )


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        ({"num_replicas": "two"}, "num_replicas: expected int, got 'two'"),
        ({"num_replicas": "0"}, "num_replicas: must be 1 or more, got 0"),
        ({"max_models_per_replica": True}, "max_models_per_replica: expected int, got True"),
        ({"num_replica": "2"}, "num_replica"),
    ],
)
def test_bad_arguments_are_named(args: dict[str, object], problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        settings_from_args(args)
    assert caught.value.source == "synapse_ray:app arguments"
    assert any(problem in line for line in caught.value.problems), caught.value.problems


def test_the_catalog_is_read_and_checked_where_the_app_is_built(tmp_path: Path) -> None:
    path = write_catalog(tmp_path, mock_model("m"))
    catalog, config = read_catalog(Settings(catalog=str(path)))
    assert catalog.source == str(path)
    assert catalog.config() == config
    assert [m.name for m in config.models] == ["m"]


def test_a_missing_or_bad_catalog_fails_before_deploying(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read file"):
        read_catalog(Settings(catalog=str(tmp_path / "absent.toml")))
    bad = tmp_path / "bad.toml"
    bad.write_text('[[models]]\nname = "m"\nceiling = "long"\n', encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        read_catalog(Settings(catalog=str(bad)))
    assert any(line.startswith("models[0].ceiling") for line in caught.value.problems)


def test_without_a_catalog_the_shipped_one_is_served() -> None:
    catalog, config = read_catalog(Settings())
    assert "mini-a" in [m.name for m in config.models]
    assert catalog.config() == config


def test_graceful_shutdown_leaves_room_to_drain_and_close() -> None:
    config = HostConfig(exchange_timeout_s=10.0, exit_grace_s=2.0)
    bound = shutdown_bound_s(config)
    assert bound == 10.0 + 4 * 2.0 + 1.0
    assert graceful_shutdown_s(Settings(), config) == 10.0 + bound
    assert graceful_shutdown_s(Settings(graceful_shutdown_timeout_s=bound), config) == bound
    with pytest.raises(ConfigError, match="graceful_shutdown_timeout_s: 5 s is shorter"):
        graceful_shutdown_s(Settings(graceful_shutdown_timeout_s=5.0), config)


def test_the_documented_serve_config_is_valid() -> None:
    from ray.serve.schema import ServeDeploySchema

    path = Path(__file__).parents[3] / "docs" / "serve-config.yaml"
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    ServeDeploySchema.model_validate(config)
    (application,) = config["applications"]
    assert application["import_path"] == "synapse_ray:app"
    settings_from_args(application["args"])
    (deployment,) = application["deployments"]
    assert deployment["name"] == "SynapseHosts"
    assert deployment["ray_actor_options"]["resources"] == {LANE_RESOURCE: 1}
    # What the builder would choose for the shipped catalog's bounds.
    shipped = read_catalog(Settings())[1]
    assert deployment["graceful_shutdown_timeout_s"] == graceful_shutdown_s(Settings(), shipped)


def test_a_boolean_that_is_not_one_is_named() -> None:
    with pytest.raises(ConfigError) as caught:
        settings_from_args({"wait_for_lanes": "maybe"})
    assert any("wait_for_lanes: expected true or false" in p for p in caught.value.problems)


def test_serve_run_without_synapse_http_says_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The app is found by name in ``synapse.apps``, not imported: with no
    ``http`` app registered, building the deployment fails at once."""
    monkeypatch.setattr(md, "entry_points", lambda *, group: md.EntryPoints(()))
    with pytest.raises(PluginError, match=r"no ASGI app named 'http'.*pip install synapse-http"):
        app({})


def test_the_deployment_finds_synapse_http_s_app_by_name() -> None:
    assert http_app() is asgi_app
