"""Every ``synapse serve`` option from its ``SYNAPSE_<OPTION>`` variable.

Each variable is set to a value other than the option's default and the
test checks where it lands: in the configuration, the settings or the
arguments ``serve`` is given (replaced here by a recorder, so no socket is
bound and nothing starts). A new option without a variable, or without a
row here, fails the first test.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

import synapse_http.cli
import synapse_http.plugin
import synapse_http.server
from synapse_core.cli import make_cli
from synapse_core.config import ModelSpec
from synapse_core.plugins import PluginHost
from synapse_core.testing import catalog_toml, model_entry, transport_plugin
from synapse_core.testing.fake import FakeTransport
from synapse_core.transport import ModelSource


class FolderTransport(FakeTransport):
    """A fake transport that takes ``--model`` folders."""

    def model_from_source(self, source: ModelSource) -> ModelSpec:
        return ModelSpec(source.name, "embed", self.name, "pkg", 32, {"dims": 8})


Seen = dict[str, Any]
Check = Callable[[Seen], object]


def setup_values(tmp: Path) -> dict[str, tuple[str, Check]]:
    """Each variable's value, and what must hold once the command has read it."""
    catalog = tmp / "catalog.toml"
    catalog.write_text(catalog_toml(model_entry("from-catalog")), encoding="utf-8")
    (tmp / "folder-model").mkdir()
    return {
        "SYNAPSE_CATALOG": (str(catalog), lambda s: s["config"].model("from-catalog")),
        "SYNAPSE_MODEL": (
            f"{tmp / 'folder-model'} other={tmp / 'folder-model'}",
            lambda s: s["config"].model("folder-model") and s["config"].model("other"),
        ),
        "SYNAPSE_TRANSPORT": (
            "folders",
            lambda s: s["config"].model("folder-model").transport == "folders",
        ),
        "SYNAPSE_HOST": ("localhost", lambda s: s["host"] == "localhost"),
        "SYNAPSE_PORT": ("0", lambda s: s["port"] == 0),
        "SYNAPSE_API_KEY": ("from-env", lambda s: s["settings"].api_key == "from-env"),
        "SYNAPSE_REQUEST_TIMEOUT": ("7.5", lambda s: s["settings"].request_timeout_s == 7.5),
        "SYNAPSE_MAX_BODY_BYTES": ("1234", lambda s: s["settings"].max_body_bytes == 1234),
        "SYNAPSE_MAX_INPUTS": ("12", lambda s: s["settings"].max_inputs == 12),
        "SYNAPSE_SHUTDOWN_GRACE": ("3", lambda s: s["settings"].shutdown_grace_s == 3.0),
        "SYNAPSE_DRAIN_GRACE": ("0", lambda s: s["settings"].drain_s == 0.0),
        "SYNAPSE_HEADER_TIMEOUT": ("2.5", lambda s: s["settings"].header_timeout_s == 2.5),
        "SYNAPSE_KEEP_ALIVE_TIMEOUT": ("4", lambda s: s["settings"].keep_alive_s == 4.0),
        "SYNAPSE_PRELOAD": (
            "from-catalog other",
            lambda s: s["settings"].preload == ("from-catalog", "other"),
        ),
        "SYNAPSE_COALESCE": ("false", lambda s: s["config"].coalesce is False),
        "SYNAPSE_IDLE_UNLOAD_S": ("90", lambda s: s["config"].idle_unload_s == 90.0),
        "SYNAPSE_BACKEND": ("trio", lambda s: s["backend"] == "trio"),
        "SYNAPSE_LOG_FORMAT": ("json", lambda s: s["log_format"] == "json"),
        "SYNAPSE_ACCESS_LOG": ("true", lambda s: s["settings"].access_log is True),
        "SYNAPSE_OTLP_ENDPOINT": (
            "http://127.0.0.1:4318",
            lambda s: s["settings"].otlp_endpoint == "http://127.0.0.1:4318",
        ),
    }


def run_serve(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str | None], *args: str
) -> tuple[Seen, Any]:
    seen: Seen = {}

    async def recorded(config: Any, settings: Any, **kwargs: Any) -> None:
        seen.update(config=config, settings=settings, **kwargs)

    monkeypatch.setattr(synapse_http.server, "serve", recorded)
    monkeypatch.setattr(synapse_http.cli, "configure_logging", lambda f: seen.update(log_format=f))
    plugins = [FolderTransport("folders"), FolderTransport("cpu"), FakeTransport("mock")]
    cli = make_cli(lambda: PluginHost([*map(transport_plugin, plugins), synapse_http.plugin]))
    result = CliRunner().invoke(cli, ["serve", *args], env=env)
    return seen, result


def serve_options() -> list[click.Option]:
    command = synapse_http.cli.serve_command
    return [p for p in command.params if isinstance(p, click.Option) and p.name != "help"]


def test_every_option_has_a_variable_shown_in_help(tmp_path: Path) -> None:
    names = {opt.envvar for opt in serve_options()}
    assert all(isinstance(n, str) and n.startswith("SYNAPSE_") for n in names), names
    assert names == set(setup_values(tmp_path)), "a serve option without a row here"
    assert all(opt.show_envvar for opt in serve_options())


def test_each_variable_takes_effect(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    values = setup_values(tmp_path)
    env: dict[str, str | None] = {name: value for name, (value, _) in values.items()}
    seen, result = run_serve(monkeypatch, env)
    assert result.exit_code == 0, result.output
    failed = [name for name, (_, holds) in values.items() if not holds(seen)]
    assert failed == []


def test_defaults_hold_without_the_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same checks fail with no variable set: each row tests its variable."""
    values = setup_values(tmp_path)
    cleared: dict[str, str | None] = dict.fromkeys(values)
    seen, result = run_serve(monkeypatch, cleared)
    assert result.exit_code == 0, result.output
    held = []
    for name, (_, holds) in values.items():
        try:
            if holds(seen):
                held.append(name)
        except AttributeError:  # a model that is not there
            pass
    assert held == []


def test_a_flag_wins_over_its_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen, result = run_serve(
        monkeypatch, {"SYNAPSE_MAX_INPUTS": "12", "SYNAPSE_CATALOG": None}, "--max-inputs", "5"
    )
    assert result.exit_code == 0, result.output
    assert seen["settings"].max_inputs == 5


def test_a_bad_value_names_its_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, result = run_serve(monkeypatch, {"SYNAPSE_PORT": "eighty", "SYNAPSE_CATALOG": None})
    assert result.exit_code == 2
    assert "SYNAPSE_PORT" in result.output or "--port" in result.output
