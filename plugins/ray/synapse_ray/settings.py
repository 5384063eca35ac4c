"""The deployment's settings: what ``serve run synapse_ray:app key=value ...`` or
a Serve config file's ``args:`` may say, structured with cattrs.

``serve run`` hands every argument over as a string, a config file as YAML
values: numbers are accepted either way, anything else is refused with the
argument's name.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import cattrs

from synapse_core import (
    CLOSE_SLACK_S,
    DEFAULT_CATALOG_SOURCE,
    ConfigError,
    HostConfig,
    default_catalog_text,
)
from synapse_core.frontend import FieldInvalid, positive, structuring_problems

#: the custom Ray resource a node declares once per device lane it can host
LANE_RESOURCE = "synapse_lane"


def _at_least_one(instance: object, attribute: attrs.Attribute[Any], value: int) -> None:
    if value < 1:
        raise FieldInvalid(attribute.name, f"must be 1 or more, got {value!r}")


def _key(instance: object, attribute: attrs.Attribute[Any], value: str | None) -> None:
    # `api_key=` would otherwise expect "Bearer " with nothing after it
    if value is not None and not value.strip():
        raise FieldInvalid(
            attribute.name,
            "the key is empty, so clients would have to send 'Bearer ' with no key; "
            "give a key, or leave api_key unset to serve without one",
        )


@attrs.frozen
class Settings:
    """How the deployment is built; every field has a default."""

    #: path of the catalog (TOML) on the machine that runs ``serve run``; its
    #: text is shipped to the replicas. ``None``: the catalog shipped with the core.
    catalog: str | None = None
    #: ``None``: Ray's default (one), or what a config file's autoscaling decides
    num_replicas: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(_at_least_one)
    )
    #: Ray's LRU bound: past it, the least recently used model is retired
    max_models_per_replica: int = attrs.field(default=4, validator=_at_least_one)
    lane_resource: str = LANE_RESOURCE
    #: with no node offering enough lanes, wait for nodes that do to join
    #: (an autoscaling cluster) instead of failing, or of running one replica
    #: without a lane on a lone node (see :mod:`synapse_ray.lanes`)
    wait_for_lanes: bool = False
    #: ``None``: long enough for the host to retire every worker (see :func:`shutdown_bound_s`)
    graceful_shutdown_timeout_s: float | None = None
    #: the HTTP app's: clients must send ``Authorization: Bearer <api_key>``
    api_key: str | None = attrs.field(default=None, validator=_key)
    #: the HTTP app's: the longest a call may take
    request_timeout_s: float = attrs.field(default=30.0, validator=positive)

    def http(self) -> dict[str, object]:
        """The options of the HTTP app each replica serves (settings of
        ``synapse serve``, by name)."""
        return {"api_key": self.api_key, "request_timeout_s": self.request_timeout_s}


_converter = cattrs.Converter(forbid_extra_keys=True)


def _number(kind: type[int] | type[float]) -> None:
    def structure(value: Any, _: type) -> int | float:
        if isinstance(value, bool):
            raise TypeError(f"expected {kind.__name__}, got {value!r}")
        if isinstance(value, str):
            try:
                return kind(value)
            except ValueError:
                raise TypeError(f"expected {kind.__name__}, got {value!r}") from None
        if isinstance(value, int) or (kind is float and isinstance(value, float)):
            return kind(value)
        raise TypeError(f"expected {kind.__name__}, got {value!r}")

    _converter.register_structure_hook(kind, structure)


_number(int)
_number(float)

#: what ``serve run``'s ``key=value`` strings may say for a boolean
_BOOLEANS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def _boolean(value: Any, _: type) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in _BOOLEANS:
        return _BOOLEANS[value.lower()]
    raise TypeError(f"expected true or false, got {value!r}")


_converter.register_structure_hook(bool, _boolean)


def settings_from_args(args: Mapping[str, Any]) -> Settings:
    """Structure the application builder's arguments; :class:`ConfigError` names each bad one."""
    try:
        return _converter.structure(dict(args), Settings)
    except Exception as exc:
        raise ConfigError("synapse_ray:app arguments", structuring_problems(exc)) from None


@attrs.frozen
class Catalog:
    """The catalog as shipped to replicas: its text and where it came from."""

    text: str
    source: str

    def config(self) -> HostConfig:
        return HostConfig.from_toml_text(self.text, source=self.source)


def read_catalog(settings: Settings) -> tuple[Catalog, HostConfig]:
    """Read and check the catalog where the deployment is built, so a bad
    catalog fails ``serve run`` at once instead of every replica later."""
    if settings.catalog is None:
        catalog = Catalog(default_catalog_text(), DEFAULT_CATALOG_SOURCE)
        return catalog, catalog.config()
    path = Path(settings.catalog)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(str(path), [f"cannot read file: {exc.strerror or exc}"]) from None
    catalog = Catalog(text, str(path))
    return catalog, catalog.config()


def shutdown_bound_s(config: HostConfig) -> float:
    """How long closing a host may take: draining one exchange, a polite exit,
    then SIGTERM and SIGKILL, each confirmed (the bound of ``Host.aclose``)."""
    return config.exchange_timeout_s + 4 * config.exit_grace_s + CLOSE_SLACK_S


def graceful_shutdown_s(settings: Settings, config: HostConfig) -> float:
    """Ray's ``graceful_shutdown_timeout_s`` for the replicas.

    Ray first waits for the replica's ongoing requests, then runs its
    destructor, which closes the host; past the timeout Ray kills the replica.
    The default leaves room for both: one exchange's worth of draining, then
    the host's whole close bound. A shorter value that is set on purpose is
    refused, since the host could then be killed with workers still running.
    """
    bound = shutdown_bound_s(config)
    chosen = settings.graceful_shutdown_timeout_s
    if chosen is None:
        return config.exchange_timeout_s + bound
    if chosen < bound:
        raise ConfigError(
            "synapse_ray:app arguments",
            [
                f"graceful_shutdown_timeout_s: {chosen:g} s is shorter than the host's close "
                f"bound of {bound:g} s (exchange_timeout_s + 4 * exit_grace_s + "
                f"{CLOSE_SLACK_S:g} in {config.source}); raise it or lower those"
            ],
        )
    return chosen
