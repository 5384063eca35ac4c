"""Opening a host: :func:`open_host`, the one way a :class:`~synapse_core.host.Host`
comes to life, with its plugins loaded and its task group around it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager

import anyio

from .catalog import default_config
from .config import HostConfig
from .deadline import Clock, monotonic
from .host import AroundCall, Host
from .plugins import PluginHost


@asynccontextmanager
async def open_host(
    config: HostConfig | None = None,
    *,
    plugins: PluginHost | Iterable[object] | None = None,
    clock: Clock = monotonic,
    host_class: type[Host] = Host,
    around_call: AroundCall | None = None,
) -> AsyncIterator[Host]:
    """Open a host. Spawns nothing until a model is loaded or called.

    ``plugins``: a :class:`PluginHost`, or plugin objects to register instead
    of the installed entry points (tests), or ``None`` for the installed ones.
    ``host_class``: a subclass of :class:`Host` to open instead (one that
    does something before each call, say); it is constructed as ``Host`` is.
    ``around_call``: an :class:`AroundCall` the host runs around every embed
    and rerank call, with the call's model (a tool's hook: no subclass needed).
    Leaving the block retires every worker and confirms its exit.
    """
    if config is None:
        config = default_config()
    if isinstance(plugins, PluginHost):
        plugin_host = plugins
    elif plugins is None:
        plugin_host = PluginHost(load_entry_points=True)
    else:
        plugin_host = PluginHost(plugins)
    try:
        async with anyio.create_task_group() as tg:
            if around_call is None:
                host = host_class(config, plugin_host, clock, tg)
            else:
                host = host_class(config, plugin_host, clock, tg, around_call=around_call)
            try:
                yield host
            finally:
                await host.aclose()
                tg.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # Detached tasks never raise, so a group holds the caller's own error:
        # give it back as raised, so ``except Refused:`` works around a host.
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
