"""Where a call starts: the one route every embed, rerank, outputs and
classify call of a host takes from its caller's arguments to a running call
(:class:`Starts`).

In order: the caller's trace is made (in its own context); a call whose
texts are large together is planned in a worker thread
(:func:`~synapse_core.bounds.plan_large`), any other on the spot; a call
waits while its model's idle workers are let go; then, before any await,
the host must be open, the deadline not passed, the catalog must accept the
model for the task and the model must not be retired. A small embed call
then joins its model's coalescer (``coalesce = true``); any other call
starts: a worker slot is chosen (:mod:`.replicas`), the head start taken
(:class:`~synapse_core.serving.CallRunner`), and its detached task started
in the host's task group.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import anyio
from anyio.abc import TaskGroup

from .bounds import (
    OFFLOAD_CHARS,
    TOKENIZING_THREADS,
    Truncate,
    characters,
    plan_large,
    planned_for,
    small,
)
from .call import Call
from .catalog import Catalog, Entry
from .coalesce import Coalescer, Line
from .config import HostConfig, Task
from .cut import Selection, request_budget, selection_of
from .deadline import Clock, Deadline, check_deadline, wait_bounded
from .errors import DeadlineExceeded, HostClosed, Retired
from .idle import Idle
from .kinds import Kind
from .naming import shown
from .plan import Plan
from .plugins import PluginHost
from .residency.worker import Worker
from .roster import Roster
from .serving import CallRunner
from .tracing import NO_TRACE, NO_TRACER, CallTrace, Tracer


class Asked(NamedTuple):
    """One call as its caller asked for it (a tuple: made once per call, on
    the hot path)."""

    model: str
    task: Task
    texts: Sequence[str | Sequence[int]]
    query: str | None
    deadline: Deadline | None
    truncate: Truncate
    #: the outputs asked for (``Plan.outputs``); empty: the task's own
    outputs: tuple[Kind, ...] = ()


class Starts:
    """The call-start route of one host, and what it checks: whether the host
    is closed and which models are retired."""

    def __init__(
        self,
        config: HostConfig,
        plugins: PluginHost,
        clock: Clock,
        tg: TaskGroup,
        catalog: Catalog,
        roster: Roster,
        runner: CallRunner,
        idle: Idle,
    ) -> None:
        self._config = config
        self._plugins = plugins
        self._clock = clock
        self._tg = tg
        self._catalog = catalog
        self._roster = roster
        self._runner = runner
        self._idle = idle
        #: told of every call as it passes the serving path's points
        self.tracer: Tracer = NO_TRACER
        #: models retired and not loaded since: their calls are refused
        # Invariant: a model is here from ``retired_now`` until ``loaded_now``.
        self.retired: set[str] = set()
        # Invariant: once set, never unset; every call is then refused.
        self.closed = False
        #: per model, when ``config.coalesce`` is on
        # Invariant: at most one per model, made on its first small call and
        #   kept for the host's life (closed with the host).
        self.coalescers: dict[str, Coalescer] = {}
        #: the worker threads planning this host's large calls
        self._planners = anyio.CapacityLimiter(TOKENIZING_THREADS)

    # -- the route --------------------------------------------------------------------

    async def call(self, asked: Asked, plan: Plan | None = None) -> Call:
        """Start the call ``asked`` for (of ``plan``, if it was planned already).
        A small call is planned and started without a pause, so its refusals
        and errors are raised before its caller's first await."""
        trace = self.tracer.call(asked.model, asked.task)  # in the caller's context
        plan = plan or await self.plan_large(asked)
        while (unloading := self._idle.unloading.get(asked.model)) is not None:
            # The model's idle workers are being let go: its next call starts
            # them again once their exits are confirmed (never a pause otherwise).
            expired = DeadlineExceeded(
                f"deadline passed waiting for {shown(asked.model)}'s idle workers to exit; "
                "nothing was sent"
            )
            deadline = asked.deadline or Deadline.never()
            await wait_bounded(unloading.wait, deadline, self._clock, expired)
        return self.now(asked, plan, trace)

    async def plan_large(self, asked: Asked) -> Plan | None:
        """The plan of a call whose texts are large together, made in a worker
        thread (:func:`~synapse_core.bounds.plan_large`); ``None`` for any
        other call, which is planned on the spot."""
        if characters(asked.texts, asked.query) <= OFFLOAD_CHARS:
            return None
        self.check_open()
        check_deadline(asked.deadline)
        entry = self._catalog.entry(asked.model, asked.task)
        return await plan_large(entry, asked.texts, asked.query, asked.truncate, self._planners)

    def now(self, asked: Asked, plan: Plan | None = None, trace: CallTrace = NO_TRACE) -> Call:
        """Plan (unless given ``plan``) and start a call, raising refusals and
        head-start errors at once; ``trace`` is told each point it passes."""
        if self.closed:  # an attribute read: open hosts pay no call
            self.check_open()
        model = asked.model
        check_deadline(asked.deadline)
        entry = self._catalog.entry(model, asked.task)
        plan = planned_for(entry, asked.texts, asked.query, asked.truncate, plan, asked.outputs)
        trace.planned(plan)
        self.check_not_retired(model)
        self._idle.touch(model)
        deadline = asked.deadline or Deadline.never()
        if self._config.coalesce and (coalescer := self._coalescer(entry)).joins(plan):
            call = Call.new(plan, deadline, anyio.Event(), trace)
            coalescer.submit(call)
            return call
        return self._start(plan, deadline, trace=trace)

    def launch(self, call: Call) -> None:
        """Start ``call``, made already: queued to be coalesced, or coalesced."""
        if call.admitted:  # queued, so it may start after a retire (``now`` checked the rest)
            self.check_not_retired(call.plan.model)
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
        entry = self._catalog.entries[plan.model]
        replicas = self._roster.replicas_of(entry)
        worker = replicas.choose(len(replicas.slots) > 1 and small(entry, plan))
        if isinstance(worker, int):  # an empty slot: a worker starts there for this call
            if call is None or not call.admitted:
                runner.check_room()  # a refused call leaves no worker record behind
            worker = self._roster.worker(entry, worker)
            vacant = None
        else:  # a small call sent to a busy worker: an empty slot starts beside it
            vacant = replicas.vacant() if worker.inflight else None
        sup = self._roster.supervisors[worker.lane.info.lane_id]
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
        if self.closed or entry.spec.name in self.retired:
            return
        worker = self._roster.worker(entry, slot)
        self._roster.supervisors[worker.lane.info.lane_id].start(worker)

    def _coalescer(self, entry: Entry) -> Coalescer:
        model = entry.spec.name
        coalescer = self.coalescers.get(model)
        if coalescer is None:
            assert entry.transport is not None  # the catalog refused the call otherwise
            budget = request_budget(entry.spec, entry.transport.transport)
            coalescer = Coalescer(self, model, budget, entry.spec.workers)
            self.coalescers[model] = coalescer
        return coalescer

    # -- what a coalescer asks of the route (coalesce.Launcher) -----------------------

    @property
    def line(self) -> Line:
        """The host's count of waiting calls."""
        return self._runner

    def first_worker(self, model: str) -> Worker | None:
        """The first live worker record of ``model``, if any."""
        replicas = self._roster.replicas.get(model)
        return replicas.first() if replicas is not None else None

    def selection(self, worker: Worker) -> Selection:
        """How a call picks buckets on ``worker`` now."""
        return selection_of(worker, self._plugins)

    # -- the state the route checks ---------------------------------------------------

    def check_open(self) -> None:
        """Refuse with ``HostClosed`` once the host is closed."""
        if self.closed:
            raise HostClosed("the host is closed; open a new one to serve models")

    def check_not_retired(self, model: str) -> None:
        """Refuse with ``Retired`` a call of a model retired and not loaded since."""
        if model in self.retired:
            raise Retired(f"model {model!r} was retired; load it again to serve it")

    def retired_now(self, model: str) -> None:
        """``model`` is being retired: its calls are refused until it is loaded."""
        self.retired.add(model)

    def loaded_now(self, model: str) -> None:
        """``model`` is being loaded: its calls are served again."""
        self.retired.discard(model)

    def close(self) -> None:
        """Refuse every call from now on; end every coalesced call still queued."""
        self.closed = True
        for model, coalescer in self.coalescers.items():
            coalescer.close(Retired.host_closing(model))
