"""The host: the public face of Synapse (``Host``; :mod:`.opening` opens one)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, TypeVar

import anyio
from anyio.abc import TaskGroup

from . import matryoshka
from .bounds import Truncate
from .call import EmbedResult, RerankResult
from .catalog import Catalog
from .classify import ClassifyCalls
from .config import HostConfig, Task
from .deadline import Clock, Deadline, check_deadline
from .idle import Idle
from .outputs import OutputCalls
from .plugins import PluginHost
from .prompts import prompted
from .replicas import for_each
from .residency.supervisor import Backlog, Supervisor
from .residency.worker import Phase, Worker
from .roster import Roster
from .scoring import scores_of
from .serving import CallRunner
from .snapshot import HostSnapshot, take
from .starting import Asked, Starts
from .tracing import Tracer

#: scheduling slack on top of the bounds a close is made of
CLOSE_SLACK_S = 1.0

_R = TypeVar("_R")


class AroundCall(Protocol):
    """What a tool runs around every embed and rerank call (``open_host(around_call=...)``),
    say to make the model resident in a cache of its own first: given the model, once the
    catalog accepted it for the call's task, and ``call``, which starts the call anew each
    time it is called; it returns what the call returned (or raises)."""

    def __call__(self, model: str, call: Callable[[], Awaitable[_R]], /) -> Awaitable[_R]: ...


class Host(OutputCalls, ClassifyCalls):
    """Serves embed, rerank and classify calls. Create it with :func:`open_host`."""

    def __init__(
        self,
        config: HostConfig,
        plugins: PluginHost,
        clock: Clock,
        tg: TaskGroup,
        *,
        around_call: AroundCall | None = None,
    ) -> None:
        self.config = config
        self.plugins = plugins
        self.clock = clock
        self.catalog = Catalog(config, plugins)
        self.backlog = Backlog()
        self._roster = Roster(config, plugins, clock, tg, self.backlog)
        #: per lane id, its supervisor
        self.supervisors: dict[str, Supervisor] = self._roster.supervisors
        self._runner = CallRunner(
            plugins,
            clock,
            anyio.CapacityLimiter(config.max_concurrent),
            self.backlog,
            config.max_waiting,
        )
        self._around: AroundCall | None = around_call
        self._idle = Idle(self.catalog.config, clock, self._roster)
        # The one place a call starts; it owns the closed flag and the retired set.
        self._starts = Starts(
            config, plugins, clock, tg, self.catalog, self._roster, self._runner, self._idle
        )
        if self._idle.limits:  # models idle past their idle_unload_s let go
            tg.start_soon(self._idle.run, self._starts.retired, name="idle models")

    @property
    def tracer(self) -> Tracer:
        """Told of every call as it passes the serving path's points (a front
        end that traces calls installs its own; the default records nothing).
        Set it on the host, not on a subclass: the route that starts calls
        (:mod:`.starting`) holds it."""
        return self._starts.tracer

    @tracer.setter
    def tracer(self, tracer: Tracer) -> None:
        self._starts.tracer = tracer

    # -- public API -----------------------------------------------------------------

    async def embed(
        self,
        model: str,
        texts: Sequence[str | Sequence[int]],
        *,
        deadline: Deadline | None = None,
        truncate: Truncate = False,
        prompt_name: str | None = None,
        dimensions: int | None = None,
    ) -> EmbedResult:
        """Embed ``texts``; one vector per text, in input order.

        A text may also be given as token ids of the model's tokenizer.
        ``truncate=True`` (or ``"end"``) cuts a text over the model's ceiling
        at its end to fit instead of refusing it, ``"start"`` at its start;
        the result's ``truncated`` lists the indexes cut. ``prompt_name``
        puts that prompt of the model (``synapse catalog`` lists them) in
        front of each text, as sentence-transformers' ``prompt_name`` does.
        ``dimensions`` cuts each vector to that many values, normalised again,
        for a model trained to be cut so (:mod:`~synapse_core.matryoshka`).
        """
        if prompt_name is not None:
            texts = prompted(self.catalog.entry(model, "embed"), prompt_name, texts)
        asked = Asked(model, "embed", texts, None, deadline, truncate)
        if self._around is not None:
            self._accepts(model, "embed")
            return await self._around(model, lambda: self._embed(asked, dimensions))
        return await self._embed(asked, dimensions)

    async def _embed(self, asked: Asked, dimensions: int | None) -> EmbedResult:
        if dimensions is not None:  # refused before the call where the size is known
            self._check_open()  # a closed host or a retired model is said first
            entry = self.catalog.entry(asked.model, "embed")
            self._starts.check_not_retired(asked.model)
            matryoshka.check(entry, dimensions, self._dims_of(asked.model))
        call = await self._starts.call(asked)
        tokens = call.plan.tokens  # counted while the worker computes
        await self._runner.wait(call)
        rows: list[list[float]] = call.rows  # type: ignore[assignment]
        identity = call.identity
        if dimensions is not None:
            entry = self.catalog.entries[asked.model]
            cut = matryoshka.applied(entry, dimensions, rows)
            if cut is not rows:  # another vector space: its identity says so
                rows, identity = cut, f"{identity};dims={dimensions}"
        return EmbedResult(asked.model, rows, identity, call.plan.truncated, tokens)

    async def rerank(
        self,
        model: str,
        query: str,
        documents: Sequence[str],
        *,
        deadline: Deadline | None = None,
        truncate: Truncate = False,
    ) -> RerankResult:
        """Score ``documents`` against ``query``; one score per document, in input order.

        ``truncate=True`` (or ``"end"``, or ``"start"``) cuts a document that
        does not fit the ceiling with the query instead of refusing it (the
        query is never cut); ``truncated`` lists the indexes cut. A
        cross-encoder's scores are the sigmoid of its logits, which are the
        result's ``raw_scores``.
        """
        if self._around is not None:
            self._accepts(model, "rerank")
            return await self._around(
                model, lambda: self._rerank(model, query, documents, deadline, truncate)
            )
        return await self._rerank(model, query, documents, deadline, truncate)

    async def _rerank(
        self,
        model: str,
        query: str,
        documents: Sequence[str],
        deadline: Deadline | None,
        truncate: Truncate,
    ) -> RerankResult:
        call = await self._starts.call(Asked(model, "rerank", documents, query, deadline, truncate))
        tokens = call.plan.tokens  # counted while the worker computes
        await self._runner.wait(call)
        raw = [row[0] for row in call.rows if row is not None]
        scores = scores_of(self.catalog.entries[model].traits, raw)
        return RerankResult(model, scores, call.identity, call.plan.truncated, tokens, raw)

    async def load(self, model: str, *, deadline: Deadline | None = None) -> None:
        """Start the model's workers and wait for their hellos; no inference."""
        self._check_open()
        check_deadline(deadline)
        entry = self.catalog.entry(model, self._task_of(model))
        for old in self._roster.replicas_of(entry).slots:
            while (
                old is not None
                and old.retiring
                and old.phase not in (Phase.EXITED, Phase.EXIT_UNCONFIRMED, Phase.FAILED)
            ):
                await old.changed()  # a draining worker is not a loaded one
        self._starts.loaded_now(model)
        self._idle.touch(model)
        sup = self._roster.supervisor(entry)
        slots = range(entry.spec.workers)
        workers = [self._roster.worker(entry, slot, fresh=True) for slot in slots]
        await for_each(lambda w: sup.wait_ready(w, deadline or Deadline.never()), workers)

    async def retire(self, model: str) -> None:
        """Retire the model's workers: stop new leases, drain, confirm exits, refund."""
        self._check_open()
        await self._retire(model)

    async def _retire(self, model: str) -> None:
        self._starts.retired_now(model)
        sups = self._roster.supervisors
        await for_each(lambda w: sups[w.lane.lane_id].retire(w), self._roster.live(model))

    async def unload_idle(self) -> list[str]:
        """Let go of models idle past their ``idle_unload_s`` now (see :mod:`.idle`)."""
        self._check_open()
        return await self._idle.unload(self._starts.retired)

    def resident(self, model: str) -> bool:  # a worker process, or one starting
        return self._idle.resident(model)

    def snapshot(self) -> HostSnapshot:
        return take(self.supervisors)

    def worker(self, model: str) -> Worker | None:
        """The first live worker record of ``model`` (for tests and tools)."""
        return self._starts.first_worker(model)

    def workers(self, model: str) -> list[Worker]:
        """The live worker records of ``model``, in slot order."""
        return self._roster.live(model)

    async def aclose(self) -> None:
        """Retire every worker and confirm their exits, then release lanes.

        Shielded, so a cancelled owner still closes cleanly, and bounded: if
        retirement outlives every bound it has (draining one exchange, a
        polite exit, then SIGTERM and SIGKILL), the workers left are stopped
        outright, still confirming each exit.
        """
        if self._starts.closed:
            return
        self._starts.close()  # from now on every method refuses (HostClosed)
        config = self.config
        bound = config.exchange_timeout_s + 4 * config.exit_grace_s + CLOSE_SLACK_S
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(bound) as retiring:
                async with anyio.create_task_group() as tg:
                    for model in list(self._roster.replicas):
                        tg.start_soon(self._retire, model)
            if retiring.cancelled_caught:
                for sup in self.supervisors.values():
                    for worker in list(sup.workers.values()):
                        await sup.stop_now(worker)
            for sup in self.supervisors.values():
                sup.close_lane()

    # -- internals --------------------------------------------------------------------

    def _accepts(self, model: str, task: Task) -> None:
        """Refuse, as a call would, a model the around-call hook must not see."""
        self._check_open()
        self.catalog.entry(model, task)

    def _check_open(self) -> None:
        self._starts.check_open()

    def _dims_of(self, model: str) -> int | None:
        """The size of ``model``'s vectors, once a worker of it has said."""
        worker = self._starts.first_worker(model)
        return worker.hello.dims if worker is not None and worker.hello is not None else None

    def _task_of(self, model: str) -> Task:
        return entry.spec.task if (entry := self.catalog.entries.get(model)) else "embed"
