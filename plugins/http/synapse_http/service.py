"""What every route shares: the host (opened lazily or given), settings, metrics."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from synapse_core import Deadline, Host, HostConfig, PluginHost, Refused, Task, open_host

from .errors import HTTPError, public
from .metrics import Metrics
from .schemas import ErrorBody
from .settings import ServeSettings
from .tokenizing import Tokenizing

if TYPE_CHECKING:
    from .otel import OtelTracing
#: the special tokens before and after a sequence, as ids
Framing = tuple[tuple[int, ...], tuple[int, ...]]
#: a text every tokenizer has a token for, framed to see the special tokens
FRAMED_TEXT = "a"


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
        #: per model, the special tokens its tokenizer frames a sequence with
        self._framings: dict[str, Framing | None] = {}

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

    def framing(self, model: str) -> Framing | None:
        """The ids of the special tokens before and after a sequence of
        ``model`` (``([101], [102])`` for BERT's ``[CLS] ... [SEP]``), as its
        tokenizer's ``pieces`` tell them; ``None`` for a tokenizer that cannot
        tell (its ``/tokenize`` gives no special tokens either)."""
        if model in self._framings:
            return self._framings[model]
        framing = None
        entry = self.host.catalog.entries.get(model)
        pieces = getattr(entry.tokenizer, "pieces", None) if entry is not None else None
        if pieces is not None:
            try:
                tokens = pieces(FRAMED_TEXT, True)
            except Exception:  # a tokenizer that cannot frame a word: the ids stay as sent
                tokens = []
            plain = [i for i, token in enumerate(tokens) if not token.special]
            if plain:
                head = tuple(token.id for token in tokens[: plain[0]])
                tail = tuple(token.id for token in tokens[plain[-1] + 1 :])
                framing = (head, tail) if head or tail else None
        self._framings[model] = framing
        return framing

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


def unavailable(host: Host) -> dict[str, str]:
    """The catalog's models that cannot serve now, each with why, paths in
    it shortened (:func:`~.errors.public`): those the catalog refuses, and
    those whose worker failed for good or could not be confirmed gone.
    For authenticated routes only: ``/health`` says nothing of models."""
    reasons = {
        name: public(entry.problem)
        for name, entry in host.catalog.entries.items()
        if not entry.available
    }
    for lane in host.snapshot().lanes.values():
        for worker in lane.workers:
            if worker.state in ("failed", "exit_unconfirmed") and worker.model not in reasons:
                reasons[worker.model] = public(
                    f"the worker of model {worker.model!r} cannot serve: {worker.reason}"
                )
    return reasons


#: how long a preloaded worker may take to start
PRELOAD_TIMEOUT_S = 120.0


async def preload(host: Host, models: Iterable[str]) -> None:
    """Start ``models``' workers, one after the other, and wait for their hellos."""
    for model in models:
        await host.load(model, deadline=Deadline.after(PRELOAD_TIMEOUT_S))
