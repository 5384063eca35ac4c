"""Test support for Synapse and for plugin authors' own test suites: the
published module for tests (with the submodules below).

Tests should never auto-load installed entry points: register the plugins
under test explicitly with :func:`transport_plugin` and ``open_host(plugins=...)``.
Catalogs for tests: :func:`model_entry` builds a model entry,
:func:`catalog_toml` writes entries as TOML, :func:`host_config` reads them
into a :class:`~synapse_core.HostConfig`.

- :mod:`synapse_core.testing.fake`: the ``fake`` transport, subprocess and
  in-process, with fault knobs: what the core's own tests serve with.
- :mod:`synapse_core.testing.conformance`: the conformance suite for a
  transport, to run from a plugin's tests.
- :mod:`synapse_core.testing.pytest_plugin`: the shared ``anyio_backend``
  fixture (asyncio and trio).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Mapping
from typing import Any

from ..config import HostConfig
from ..hookspecs import hookimpl
from ..transport import Transport

__all__ = [
    "catalog_toml",
    "eventually",
    "host_config",
    "model_entry",
    "pid_exists",
    "transport_plugin",
]


class _TransportPlugin:
    def __init__(self, transports: tuple[Transport, ...]) -> None:
        self.transports = transports
        self.__name__ = "test-transports:" + ",".join(t.name for t in transports)

    @hookimpl
    def synapse_register_transports(self, register: Callable[[Transport], None]) -> None:
        for transport in self.transports:
            register(transport)


def pid_exists(pid: int) -> bool:
    """Whether a process ``pid`` exists (a zombie not yet reaped still does)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def transport_plugin(*transports: Transport) -> Any:
    """A plugin object that registers exactly ``transports``."""
    return _TransportPlugin(transports)


def catalog_toml(*models: Mapping[str, Any], **settings: Any) -> str:
    """A catalog as TOML text, from model dicts and top-level settings."""
    import json

    def value(v: Any) -> str:
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{json.dumps(k)} = {value(x)}" for k, x in v.items()) + " }"
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, list | tuple):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return json.dumps(v)

    lines = [f"{k} = {value(v)}" for k, v in settings.items()]
    for model in models:
        lines.append("[[models]]")
        lines.extend(f"{k} = {value(v)}" for k, v in model.items())
    return "\n".join(lines) + "\n"


def model_entry(
    name: str,
    *,
    task: str = "embed",
    transport: str = "mock",
    package: str | None = None,
    ceiling: int = 32,
    defaults: Mapping[str, Any] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """A catalog entry (one ``[[models]]`` table) for :func:`catalog_toml`.

    ``package`` defaults to ``pkg-<name>``: entries of different names are
    different packages. The entry's transport options are ``defaults`` (a
    suite's usual buckets, dims and so on) overridden by ``options``; the
    defaults are copied, so no two entries share a list. A suite with its own
    defaults binds them once, e.g.
    ``functools.partial(model_entry, transport="fake", defaults={"dims": 4})``.
    """
    return {
        "name": name,
        "task": task,
        "transport": transport,
        "package": f"pkg-{name}" if package is None else package,
        "ceiling": ceiling,
        "options": {**copy.deepcopy(dict(defaults or {})), **options},
    }


def host_config(
    *models: Mapping[str, Any], source: str = "<string>", **settings: Any
) -> HostConfig:
    """A host configuration from model entries and top-level settings, read
    from :func:`catalog_toml`'s text as a catalog file is (so it meets the same
    checks); ``source`` names it in errors. Bind a suite's usual settings with
    ``functools.partial`` (a setting given to a call overrides the bound one).
    """
    return HostConfig.from_toml_text(catalog_toml(*models, **settings), source=source)


async def eventually(predicate: Callable[[], bool], *, timeout: float = 10.0) -> None:
    """Yield to the event loop until ``predicate()`` holds.

    For conditions nothing signals (a task reaching a gate). ``timeout`` only
    turns a hang into a failure; it is not a timing assertion.
    """
    import anyio

    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.001)
