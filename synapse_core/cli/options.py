"""Options shared by the built-in commands, and by plugin commands that want them.

A plugin command that needs the host configuration can reuse these::

    from synapse_core.cli import catalog_option, load_config

    @cli.command()
    @catalog_option
    def mine(catalog: Path | None) -> None:
        config = load_config(catalog)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ..config import HostConfig
from ..deadline import Deadline
from ..transport import ModelSource
from .models import DEFAULT_TRANSPORT, model_options, with_sources

if TYPE_CHECKING:
    from ..plugins import PluginHost

ENV_CATALOG = "SYNAPSE_CATALOG"
F = TypeVar("F", bound=Callable[..., Any])

catalog_option: Callable[[F], F] = click.option(
    "--catalog",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar=ENV_CATALOG,
    show_envvar=True,
    default=None,
    help="Catalog file (TOML) to use instead of the one shipped with Synapse.",
)

json_option: Callable[[F], F] = click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print one JSON document on stdout instead of a human-readable listing.",
)


class Seconds(click.FloatRange):
    """A number of seconds greater than 0; ``nan`` is refused like any other
    bad number (a range check alone lets it through: nan compares false)."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        seconds = super().convert(value, param, ctx)
        if math.isnan(seconds):
            self.fail(f"{value!r} is not a number of seconds.", param, ctx)
        return seconds


deadline_option: Callable[[F], F] = click.option(
    "--deadline",
    type=Seconds(min=0, min_open=True),
    default=None,
    metavar="SECONDS",
    help="Give up (exit 1) if the answer is not ready this many seconds from the start.",
)


truncate_option: Callable[[F], F] = click.option(
    "--truncate",
    type=click.Choice(["end", "start"]),
    default=None,
    # The host's ``truncate``: False (refuse) unless given.
    callback=lambda ctx, param, value: value or False,
    help="Cut a text longer than the model's ceiling at its end (or start) to fit, "
    "instead of refusing it; the output lists the inputs cut.",
)


def load_config(
    catalog: Path | None,
    models: Sequence[ModelSource] = (),
    *,
    transport: str = DEFAULT_TRANSPORT,
    plugins: PluginHost | None = None,
) -> HostConfig:
    """The catalog file's configuration, or the shipped default catalog, plus
    an entry for each model of ``--model`` (``models``, served by
    ``transport``; without a catalog file, only those). ``plugins``: the
    transports to ask (default: the installed ones).

    Raises :class:`~synapse_core.errors.ConfigError` naming the bad field.
    """
    if catalog is None:
        from ..catalog import default_config

        config = default_config()
    else:
        config = HostConfig.from_toml(catalog)
    if not models:
        return config
    if plugins is None:
        from ..plugins import PluginHost

        plugins = PluginHost(load_entry_points=True)  # as installed_plugins() loads them
    return with_sources(config, models, transport, plugins, catalog_given=catalog is not None)


def deadline_from(seconds: float | None) -> Deadline:
    return Deadline.never() if seconds is None else Deadline.after(seconds)


def call_options(command: F) -> F:
    """The options of every command that calls a model: ``--truncate``,
    ``--deadline``, ``--json``, ``--catalog``, and ``--model`` with ``--transport``."""
    return truncate_option(deadline_option(json_option(catalog_option(model_options()(command)))))
