"""What every route shares: the host (opened lazily or given), settings, metrics."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from synapse_core import Deadline, Host, HostConfig, PluginHost, Refused, Task, open_host

from .errors import HTTPError
from .metrics import Metrics
from .schemas import ErrorBody
from .settings import ServeSettings
from .tokenizing import Tokenizing

if TYPE_CHECKING:
    from .otel import OtelTracing


class Service:
    """One app's state. The host is either given already open (the caller
    owns it) or opened by :meth:`lifespan` and closed when the app stops."""

    def __init__(
        self,
        host: Host | None,
        config: HostConfig | None,
        settings: ServeSettings,
        plugins: PluginHost | Iterable[object] | None = None,
        tracing: OtelTracing | None = None,
        owns_tracing: bool = False,
    ) -> None:
        self._host = host
        self._config = config
        self._plugins = plugins
        self.settings = settings
        self.metrics = Metrics(lambda: self._host)
        #: set when the server stops taking requests (``/health`` then says 503)
        self.stopping = False
        #: ``/tokenize``'s work, bounded (see :mod:`.tokenizing`)
        self.tokenizing = Tokenizing()
        #: the requests' tracing (``None``: off, and no request pays for it)
        self.tracing = tracing
        #: made by the app, so shut down (its last spans exported) when the app stops
        self._owns_tracing = owns_tracing
        if host is not None and tracing is not None:
            host.tracer = tracing.calls

    @property
    def host(self) -> Host:
        if self._host is None:
            raise HTTPError(
                503,
                ErrorBody(
                    error="the server is not serving (starting or stopped); retry shortly",
                    error_type="unavailable",
                    may_have_run=False,
                ),
            )
        return self._host

    @property
    def open(self) -> Host | None:
        return self._host

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        """Open the host unless one was given; preload; close what was opened."""
        try:
            if self._host is not None:
                yield
                return
            async with open_host(self._config, plugins=self._plugins) as host:
                if self.tracing is not None:
                    host.tracer = self.tracing.calls
                await preload(host, self.settings.preload)
                self._host = host
                try:
                    yield
                finally:
                    self.stopping = True
                    self._host = None
        finally:
            if self._owns_tracing and self.tracing is not None:
                self.tracing.shutdown()

    def default_model(self, task: Task) -> str:
        """The catalog's first model for ``task`` that can run here."""
        entries = self.host.catalog.entries.values()
        for entry in entries:
            if entry.spec.task == task and entry.available:
                return entry.spec.name
        raise Refused(
            "unknown-model",
            f"the catalog has no {task} model that can run here; add one or name a model",
            model="",
        )


#: how long a preloaded worker may take to start
PRELOAD_TIMEOUT_S = 120.0


async def preload(host: Host, models: Iterable[str]) -> None:
    """Start ``models``' workers, one after the other, and wait for their hellos."""
    for model in models:
        await host.load(model, deadline=Deadline.after(PRELOAD_TIMEOUT_S))
