"""``--model [NAME=]PATH_OR_HUB_ID``: serve a model folder or a hub id without
writing a catalog.

Each value becomes a catalog entry, built by the transport that serves it
(:meth:`~synapse_core.plugin.Transport.model_from_source`) from the model's
own files, so a model given this way is checked, listed and served exactly
as a catalog's entry is. The core only tells a folder from a hub id and
picks the name; what the files say is the transport's to read.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import click

from ..config import HostConfig, ModelSpec
from ..errors import ConfigError
from ..transport import ModelSource

if TYPE_CHECKING:
    from ..plugins import PluginHost

F = TypeVar("F", bound=Callable[..., Any])
#: the transport ``--model`` serves on unless ``--transport`` names another
DEFAULT_TRANSPORT = "cpu"
#: the source of a configuration made from ``--model`` alone
FLAGS_SOURCE = "--model flags"
#: a hub id: ``ORG/NAME``, as huggingface_hub spells repository ids
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]*[A-Za-z0-9]$")


def parse_source(value: str) -> ModelSource:
    """One ``--model`` value: ``PATH``, ``ORG/NAME`` or either after ``NAME=``.

    Raises :class:`click.BadParameter` saying what was wrong."""
    name, sep, where = value.partition("=")
    if not sep or "/" in name or "\\" in name:
        # No name given (an "=" inside a path is part of the path).
        name, where = "", value
    elif not name.strip():
        raise click.BadParameter(f"{value!r} gives an empty name before '='")
    if not where.strip():
        raise click.BadParameter(f"{value!r} names no folder or hub id")
    path = Path(where).expanduser()
    if path.is_dir():
        folder = path.resolve()
        return ModelSource(name or folder.name, folder=folder)
    if path.exists():
        raise click.BadParameter(f"{where!r} is a file; give the model's folder")
    if _HUB_ID.match(where) and not where.startswith("."):
        return ModelSource(name or where, hub_id=where)
    raise click.BadParameter(
        f"{where!r} is neither a folder nor a hub id (ORG/NAME, e.g. BAAI/bge-small-en-v1.5)"
    )


def _parse_all(
    ctx: click.Context, param: click.Parameter, values: Sequence[str]
) -> tuple[ModelSource, ...]:
    return tuple(parse_source(value) for value in values)


def model_options(*, envvar_prefix: str | None = None) -> Callable[[F], F]:
    """``--model`` (repeatable) and ``--transport``; ``envvar_prefix`` also
    reads them from ``<prefix>MODEL`` (several separated by spaces) and
    ``<prefix>TRANSPORT``."""

    def env(name: str) -> dict[str, Any]:
        if envvar_prefix is None:
            return {}
        return {"envvar": f"{envvar_prefix}{name}", "show_envvar": True}

    model = click.option(
        "--model",
        "models",
        multiple=True,
        metavar="[NAME=]PATH_OR_HUB_ID",
        callback=_parse_all,
        help="A model folder, or a hub id found in the local Hugging Face cache "
        "('synapse pull ORG/NAME' downloads it), served as NAME (default: the folder's "
        "name, or the hub id); its task is read from its files. Repeatable; adds to "
        "--catalog's models.",
        **env("MODEL"),
    )
    transport = click.option(
        "--transport",
        default=DEFAULT_TRANSPORT,
        show_default=True,
        help="The transport serving --model's models.",
        **env("TRANSPORT"),
    )

    def apply(function: F) -> F:
        return model(transport(function))

    return apply


def with_sources(
    config: HostConfig,
    sources: Sequence[ModelSource],
    transport: str,
    plugins: PluginHost,
    *,
    catalog_given: bool,
) -> HostConfig:
    """``config`` with a catalog entry for each of ``sources`` added.

    Without a catalog file (``catalog_given`` false) the shipped catalog's
    models are left out: ``synapse serve --model PATH`` serves that model
    alone, as TEI does. A name taken twice is a usage error."""
    if not sources:
        return config
    info = plugins.transport(transport)
    if info is None:
        installed = ", ".join(sorted(plugins.transports())) or "none"
        raise click.BadParameter(
            f"no transport {transport!r} is installed (installed: {installed}; "
            "see 'synapse plugins')",
            param_hint="'--transport'",
        )
    if not catalog_given:
        config = attrs.evolve(config, models=(), source=FLAGS_SOURCE)
    taken = {spec.name: f"the catalog ({config.source})" for spec in config.models}
    added: list[ModelSpec] = []
    for source in sources:
        if source.name in taken:
            raise click.BadParameter(
                f"{source.given}: the name {source.name!r} is already used by "
                f"{taken[source.name]}; choose another with --model OTHER={source.given}",
                param_hint="'--model'",
            )
        try:
            spec = info.transport.model_from_source(source)
        except ConfigError:
            raise
        except Exception as exc:  # a plugin's bug: say whose, in one line
            raise ConfigError(
                f"--model {source.given}",
                [f"transport {transport!r} could not read it: {exc!r}"],
            ) from None
        taken[source.name] = f"--model {source.given}"
        added.append(spec)
    return attrs.evolve(config, models=config.models + tuple(added))
