"""The host: the public face of Synapse (``Host``; :mod:`.opening` opens one)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, TypeVar

import anyio
from anyio.abc import TaskGroup

from .bounds import Asked, Plan, Truncate, planned_for, small, started
from .call import Call, EmbedResult, RerankResult
from .catalog import Catalog, Entry
from .coalesce import Coalescer
from .config import HostConfig, Task
from .cut import request_budget, selection_of
from .deadline import Clock, Deadline, check_deadline
from .errors import HostClosed, Retired
from .idle import Idle
from .kinds import Kind
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
from .tracing import NO_TRACE, NO_TRACER, CallTrace, Tracer

#: scheduling slack on top of the bounds a close is made of
CLOSE_SLACK_S = 1.0

_R = TypeVar("_R")


class AroundCall(Protocol):
    """What a tool runs around every embed and rerank call (``open_host(around_call=...)``),
    say to make the model resident in a cache of its own first: given the model, once the
    catalog accepted it for the call's task, and ``call``, which starts the call anew each
    time it is called; it returns what the call returned (or raises)."""

    def __call__(self, model: str, call: Callable[[], Awaitable[_R]], /) -> Awaitable[_R]: ...


class Host(OutputCalls):
    """Serves embed and rerank calls. Create it with :func:`open_host`."""

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
        self._tg = tg
        self.catalog = Catalog(config, plugins)
        self.backlog = Backlog()
        self._roster = Roster(config, plugins, clock, tg, self.backlog)
        #: per lane id, its supervisor
        self.supervisors: dict[str, Supervisor] = self._roster.supervisors
        #: models retired and not loaded since: their calls are refused
        # Invariant: a model is here from ``retire`` until a ``load`` of it.
        self._retired: set[str] = set()
        # Invariant: once set, never unset; every public method then refuses.
        self._closed = False
        self._runner = CallRunner(
            plugins,
            clock,
            anyio.CapacityLimiter(config.max_concurrent),
            self.backlog,
            config.max_waiting,
        )
        #: per model, when ``config.coalesce`` is on
        # Invariant: at most one per model, made on its first small call and
        #   kept for the host's life (closed with the host).
        self._coalescers: dict[str, Coalescer] = {}
        self._around: AroundCall | None = around_call
        #: told of every call as it passes the serving path's points (a front
        #: end that traces calls installs its own; the default records nothing)
        self.tracer: Tracer = NO_TRACER
        self._idle = Idle(self.catalog.config, clock, self._roster)
        if self._idle.limits:  # models idle past their idle_unload_s let go
            tg.start_soon(self._idle.run, self._retired, name="idle models")

    # -- public API -----------------------------------------------------------------

    async def embed(
        self,
        model: str,
        texts: Sequence[str | Sequence[int]],
        *,
        deadline: Deadline | None = None,
        truncate: Truncate = False,
        prompt_name: str | None = None,
    ) -> EmbedResult:
        """Embed ``texts``; one vector per text, in input order.

        A text may also be given as token ids of the model's tokenizer.
        ``truncate=True`` (or ``"end"``) cuts a text over the model's ceiling
        at its end to fit instead of refusing it, ``"start"`` at its start;
        the result's ``truncated`` lists the indexes cut. ``prompt_name``
        puts that prompt of the model (``synapse catalog`` lists them) in
        front of each text, as sentence-transformers' ``prompt_name`` does.
        """
        if prompt_name is not None:
            texts = prompted(self.catalog.entry(model, "embed"), prompt_name, texts)
        if self._around is not None:
            self._accepts(model, "embed")
            return await self._around(model, lambda: self._embed(model, texts, deadline, truncate))
        return await self._embed(model, texts, deadline, truncate)

    async def _embed(
        self,
        model: str,
        texts: Sequence[str | Sequence[int]],
        deadline: Deadline | None,
        truncate: Truncate,
    ) -> EmbedResult:
        call = await started(self, Asked(model, "embed", texts, None, deadline, truncate))
        tokens = call.plan.tokens  # counted while the worker computes
        await self._runner.wait(call)
        return EmbedResult(model, call.rows, call.identity, call.plan.truncated, tokens)  # type: ignore[arg-type]

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
        call = await started(self, Asked(model, "rerank", documents, query, deadline, truncate))
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
        self._retired.discard(model)
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
        self._retired.add(model)
        sups = self._roster.supervisors
        await for_each(lambda w: sups[w.lane.lane_id].retire(w), self._roster.live(model))

    async def unload_idle(self) -> list[str]:
        """Let go of models idle past their ``idle_unload_s`` now (see :mod:`.idle`)."""
        self._check_open()
        return await self._idle.unload(self._retired)

    def _unloading(self, model: str) -> anyio.Event | None:
        """Set once ``model``'s idle workers being let go have exited (``None``: none are)."""
        return self._idle.unloading.get(model)

    def resident(self, model: str) -> bool:  # a worker process, or one starting
        return self._idle.resident(model)

    def snapshot(self) -> HostSnapshot:
        return take(self.supervisors)

    def worker(self, model: str) -> Worker | None:
        """The first live worker record of ``model`` (for tests and tools)."""
        replicas = self._roster.replicas.get(model)
        return replicas.first() if replicas is not None else None

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
        if self._closed:
            return
        self._closed = True  # from now on every method refuses (HostClosed)
        for model, coalescer in self._coalescers.items():
            coalescer.close(Retired.host_closing(model))
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
        if self._closed:
            raise HostClosed("the host is closed; open a new one to serve models")

    def _check_not_retired(self, model: str) -> None:
        if model in self._retired:
            raise Retired(f"model {model!r} was retired; load it again to serve it")

    def _task_of(self, model: str) -> Task:
        return entry.spec.task if (entry := self.catalog.entries.get(model)) else "embed"

    def _call(
        self,
        model: str,
        task: Task,
        texts: Sequence[str | Sequence[int]],
        query: str | None,
        deadline: Deadline | None,
        truncate: Truncate = False,
        plan: Plan | None = None,
        trace: CallTrace = NO_TRACE,
        outputs: tuple[Kind, ...] = (),
    ) -> Call:
        """Plan (unless given ``plan``) and start a call, raising refusals and
        head-start errors before the caller's first await (then it waits);
        ``trace`` is told each point the call passes."""
        if self._closed:  # an attribute read: open hosts pay no call
            self._check_open()
        check_deadline(deadline)
        entry = self.catalog.entry(model, task)
        plan = planned_for(entry, texts, query, truncate, plan, outputs)
        trace.planned(plan)
        self._check_not_retired(model)
        self._idle.touch(model)
        deadline = deadline or Deadline.never()
        if self.config.coalesce and (coalescer := self._coalescer(entry)).joins(plan):
            call = Call.new(plan, deadline, anyio.Event(), trace)
            coalescer.submit(call)
            return call
        return self._start(plan, deadline, trace=trace)

    def _launch(self, call: Call) -> None:
        """Start ``call``, made already: queued to be coalesced, or coalesced."""
        if call.admitted:  # queued, so it may start after a retire (_call checked the rest)
            self._check_not_retired(call.plan.model)
        self._start(call.plan, call.deadline, call)

    def _start(
        self,
        plan: Plan,
        deadline: Deadline,
        call: Call | None = None,
        trace: CallTrace = NO_TRACE,
    ) -> Call:
        """Start a call of ``plan`` (``call``, or a new one): its head start
        now, its detached task next. The first request is written before a
        new call's record is made, which then overlaps the worker's compute."""
        runner = self._runner
        entry = self.catalog.entries[plan.model]
        replicas = self._roster.replicas_of(entry)
        worker = replicas.choose(len(replicas.slots) > 1 and small(entry, plan))
        if isinstance(worker, int):  # an empty slot: a worker starts there for this call
            if call is None or not call.admitted:
                runner.check_room()  # a refused call leaves no worker record behind
            worker = self._roster.worker(entry, worker)
            vacant = None
        else:  # a small call sent to a busy worker: an empty slot starts beside it
            vacant = replicas.vacant() if worker.inflight else None
        sup = self.supervisors[worker.lane.info.lane_id]
        head = runner.try_begin(plan, deadline, sup, worker)  # raises before any await
        # Nothing that can fail goes here: a request written and never
        # recorded would keep the channel's turn.
        if call is None:
            call = Call.new(plan, deadline, anyio.Event(), trace)
        runner.start(call, head)
        # A task of its own in the host's task group, so the caller's
        # cancellation never reaches the exchange. anyio runs a task started
        # in a cancelled group up to its first await, so even a call started
        # as the host closes gets to ``run``'s ``finally`` and lets go of
        # what its head start took.
        self._tg.start_soon(runner.run, call, sup, worker, name="call runner")
        if vacant is not None:
            self._start_in_background(entry, vacant)
        return call

    def _start_in_background(self, entry: Entry, slot: int) -> None:
        """Start a worker in ``slot`` of ``entry``'s model for calls to come (none waits;
        see :mod:`.replicas`); a closing host or a retired model starts none."""
        if self._closed or entry.spec.name in self._retired:
            return
        worker = self._roster.worker(entry, slot)
        self.supervisors[worker.lane.info.lane_id].start(worker)

    def _coalescer(self, entry: Entry) -> Coalescer:
        model = entry.spec.name
        coalescer = self._coalescers.get(model)
        if coalescer is None:
            assert entry.transport is not None  # the catalog refused the call otherwise
            budget = request_budget(entry.spec, entry.transport.transport)
            coalescer = Coalescer(
                self._launch,
                anyio.Event,
                self._runner,
                lambda: self.worker(model),
                lambda worker: selection_of(worker, self.plugins),
                budget,
                entry.spec.workers,
            )
            self._coalescers[model] = coalescer
        return coalescer
