"""ASGI apps over a host, found by name: a plugin serves another's app
without importing it (published in :mod:`synapse_core.frontend`).

A front end that has an ASGI app registers a factory in its package
metadata::

    [project.entry-points."synapse.apps"]
    http = "synapse_http.app:asgi_app"

and a plugin that serves apps somewhere else asks for it by name with
:func:`app_factory`; when nothing of that name is installed, the error says
what to install.
"""

from __future__ import annotations

import importlib.metadata as md
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, Protocol, cast

from .errors import PluginError

if TYPE_CHECKING:
    from .host import Host

#: the entry-point group ASGI app factories are registered in
APPS_GROUP = "synapse.apps"

#: an ASGI 3 application (the shape of ``starlette.types.ASGIApp``)
ASGIApp = Callable[
    [
        MutableMapping[str, Any],
        Callable[[], Awaitable[MutableMapping[str, Any]]],
        Callable[[MutableMapping[str, Any]], Awaitable[None]],
    ],
    Awaitable[None],
]


class AppFactory(Protocol):
    """Builds the app over an open host, which its caller keeps owning.

    ``options`` are the app's own settings by name; a factory refuses one it
    does not know with :class:`~synapse_core.errors.ConfigError`.
    """

    def __call__(self, host: Host, options: Mapping[str, object]) -> ASGIApp: ...


def app_factory(name: str, install: str) -> AppFactory:
    """The app factory registered as ``name`` in :data:`APPS_GROUP`.

    ``install`` names the distribution that provides it, for the error when
    none is installed. Raises :class:`~synapse_core.errors.PluginError` when
    no factory, or more than one, has that name, or when it fails to load.
    """
    found = [ep for ep in md.entry_points(group=APPS_GROUP) if ep.name == name]
    if not found:
        raise PluginError(
            f"no ASGI app named {name!r} is installed (entry-point group {APPS_GROUP!r}); "
            f"install {install} (pip install {install})"
        )
    targets = sorted({ep.value for ep in found})  # an editable install may list one twice
    if len(targets) > 1:
        raise PluginError(
            f"{len(targets)} ASGI apps are named {name!r} in entry-point group "
            f"{APPS_GROUP!r} ({', '.join(targets)}); uninstall all but one"
        )
    entry = found[0]
    try:
        factory = entry.load()
    except Exception as exc:
        raise PluginError(f"the ASGI app {name!r} ({entry.value}) failed to load: {exc!r}") from exc
    if not callable(factory):
        raise PluginError(
            f"the ASGI app {name!r} ({entry.value}) is {type(factory).__name__}, not a factory"
        )
    return cast(AppFactory, factory)
