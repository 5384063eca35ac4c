"""One call's state, from its plan to its result, and the results callers get.

A :class:`Call` is created by the host and ended by the serving path
(:mod:`synapse_core.serving`); a :class:`Coalesced` call (see
:mod:`synapse_core.coalesce`) is a call whose plan holds the inputs of
several callers' calls. Every change of a call's state is a method here:
no other module assigns to a call.

What a call holds (the execution permit, the catalog guard, one lease and
the request under way) is taken either all at once by the head start
(:class:`HeadStart`, given to the call by :meth:`Call.hold`) or one after
another by its detached task, and let go of here only, whichever path the
call took: :meth:`Call.release` when it ends, :meth:`Call.drop_lease` when
it changes shape or sees a fault, and :func:`undo_head_start` when a head
start fails before there is a call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, Self

import anyio
import attrs

from .channel import Exchange
from .deadline import Deadline
from .errors import SynapseError
from .handoff import OneShot
from .plan import Group, Item, Plan
from .residency.supervisor import Lease
from .tracing import NO_TRACE, CallTrace, joined
from .wire import Infer, Output, more_rows, rows_of

if TYPE_CHECKING:
    from .residency.supervisor import Supervisor
    from .residency.worker import Guard, Worker


@attrs.frozen
class EmbedResult:
    model: str
    #: one row per input, in input order
    vectors: list[list[float]]
    #: vector-space identity of the worker that produced the rows
    identity: str
    #: indexes of the texts cut to the ceiling (only with ``truncate=True``)
    truncated: tuple[int, ...] = ()
    #: tokens embedded, special tokens excluded (after any cut)
    tokens: int = 0


@attrs.frozen
class RerankResult:
    model: str
    #: one score per document, in input order: a cross-encoder's probability
    #: (the sigmoid of its logit), a bi-encoder's similarity
    scores: list[float]
    identity: str
    #: indexes of the documents cut to fit the ceiling with the query
    truncated: tuple[int, ...] = ()
    #: tokens of the documents scored, special tokens and query excluded
    tokens: int = 0
    #: the model's own outputs: a cross-encoder's logits (TEI's ``raw_scores``);
    #: for any other scorer the same as ``scores``
    raw_scores: list[float] = attrs.field(
        default=attrs.Factory(lambda self: self.scores, takes_self=True)
    )


class Joined(Protocol):
    """What a call served as part of others' (a coalesced call) belongs to."""

    def left(self, call: Call) -> None:
        """``call``'s caller gave up (cancelled, or past its deadline)."""


class Keeper(Protocol):
    """Where a call's permit comes from and goes back to (the host's ``CallRunner``)."""

    permits: anyio.CapacityLimiter

    def leave_line(self) -> None:
        """A call counted as waiting for a permit waits no more."""


@attrs.define(eq=False)
class HeadStart:
    """Everything the head start took for a call not made yet
    (:meth:`~synapse_core.serving.CallRunner.try_begin`): the permit, held on
    behalf of ``permit``; the catalog guard; the lease of the first step's
    shape; and that step's request, written. A call takes it all over with
    :meth:`Call.hold`, with no await in between."""

    #: the borrower the execution permit is held for (the exchange begun)
    permit: object
    lease: Lease
    begun: tuple[Infer, Exchange]
    guard: Guard


def undo_head_start(
    keeper: Keeper,
    supervisor: Supervisor,
    worker: Worker,
    exchange: Exchange,
    permit_held: bool,
    error: BaseException,
) -> None:
    """Let go of what a head start took before its records failed with
    ``error`` (off the hot path): the permit, if ``permit_held`` (on behalf
    of ``exchange``), and the request written, whose reply will not be read
    (its generation is recovered)."""
    try:
        if permit_held:
            keeper.permits.release_on_behalf_of(exchange)
    finally:
        # Whatever the permit did: a request left begun would hold the
        # channel's turn, and the worker would serve no one after it.
        if isinstance(error, Exception):
            supervisor.drop_begun(worker, exchange, f"a call's records failed: {error!r}")


@attrs.define(eq=False)
class Call:
    plan: Plan
    deadline: Deadline
    rows: list[list[float] | None]
    done: OneShot
    error: SynapseError | None = None
    identity: str = ""
    #: the caller is gone (cancelled or past its deadline): start nothing new
    # Invariant: once set, never unset.
    abandoned: bool = False
    #: what the wait under way ends in at the deadline (default DeadlineExceeded)
    expiry: SynapseError | None = None
    # What the call holds, taken by the head start (``hold``) or by its
    # detached task, and let go of by ``release`` (the lease also by ``drop_lease``).
    # Invariant: done ⇒ no permit, not queued, no guard, no lease, not begun.
    #: the borrower the execution permit is held for (this call, or the
    #: exchange its head start began, before the call was made); ``None``: no permit
    # Invariant: permit ⇒ not queued.
    permit: object | None = None
    #: counted in ``Backlog.waiting`` (and the runner's permit waiters) until it holds the permit
    queued: bool = False
    #: let in past ``max_waiting`` already (queued to be coalesced): a later
    #: wait is never refused with ``Overloaded``
    admitted: bool = False
    #: the catalog guard it holds (counted in ``Worker.inflight``, and in
    #: ``small_inflight`` if it entered as a small call)
    # Invariant: guard ⇒ permit.
    guard: Guard | None = None
    # Invariant: lease ⇒ guard and permit (one lease at a time).
    lease: Lease | None = None
    #: the request under way, begun and not yet being finished
    # Invariant: begun ⇒ lease and guard.
    begun: tuple[Infer, Exchange] | None = None
    #: the coalesced call (or its queue) this call is served in, if any
    joined: Joined | None = None
    #: told once the call has ended, whichever way (the coalescing queue moves on)
    on_end: Callable[[], None] | None = None
    #: told each point of the serving path the call passes (:mod:`.tracing`)
    trace: CallTrace = NO_TRACE
    #: the rows of each output asked for after the first (``Plan.outputs``),
    #: one list per output, in input order as ``rows`` is
    more: list[list[object]] = attrs.field(factory=list)

    @classmethod
    def new(
        cls, plan: Plan, deadline: Deadline, done: OneShot, trace: CallTrace = NO_TRACE
    ) -> Self:
        call = cls(plan, deadline, [None] * len(plan.items), done)
        call.trace = trace
        if len(plan.outputs) > 1:
            call.more = [[None] * len(plan.items) for _ in plan.outputs[1:]]
        return call

    def is_abandoned(self) -> bool:
        """``abandoned``, read after an await (a call, so type checkers do not narrow it)."""
        return self.abandoned

    def abandon(self) -> None:
        """The caller gave up: start nothing new for it."""
        self.abandoned = True
        if self.joined is not None:
            self.joined.left(self)

    def note_expiry(self, error: SynapseError | None) -> None:
        self.expiry = error

    # -- what the call holds ---------------------------------------------------------

    def hold(self, head: HeadStart) -> None:
        """Take over everything the head start took."""
        self.permit, self.lease, self.begun, self.guard = (
            head.permit,
            head.lease,
            head.begun,
            head.guard,
        )

    def queue(self) -> None:
        """Counted as waiting for a permit (by the caller, in the backlog)."""
        self.queued = True

    def took_permit(self) -> bool:
        """The permit is held on this call's behalf now; whether the call was
        counted as waiting for it (it is not any more)."""
        self.permit = self
        queued, self.queued = self.queued, False
        return queued

    def enter(self, worker: Worker, small: bool) -> None:
        """Take ``worker``'s catalog guard (retirement waits for the call to
        leave); ``small``: a small call (``cut.is_small``)."""
        self.guard = worker.enter(small)

    def leased(self, lease: Lease) -> Lease:
        self.lease = lease
        return lease

    def drop_lease(self, supervisor: Supervisor) -> None:
        """Release the lease now: before leasing another shape (one lease at
        a time), or before a fault is reported (recovery waits for it)."""
        lease, self.lease = self.lease, None
        assert lease is not None
        supervisor.release(lease)

    def began(self, begun: tuple[Infer, Exchange]) -> None:
        self.begun = begun

    def take_begun(self) -> tuple[Infer, Exchange]:
        """The request under way, handed to the exchange that finishes it."""
        begun, self.begun = self.begun, None
        assert begun is not None
        return begun

    def release(self, keeper: Keeper, supervisor: Supervisor) -> None:
        """Let go of everything the call holds, whichever path it took."""
        if self.begun is not None:
            # Only a closing host (or a bug) gets here with a request in flight;
            # a late reply then fails the next exchange's request-id check.
            self.begun[1].release()
            self.begun = None
        if self.lease is not None:
            self.drop_lease(supervisor)
        guard = self.guard
        if guard is not None:
            self.guard = None
            guard.worker.leave(guard)
        if self.permit is not None:
            permit, self.permit = self.permit, None
            keeper.permits.release_on_behalf_of(permit)
        elif self.queued:
            self.queued = False
            keeper.leave_line()

    # -- its outcome -----------------------------------------------------------------

    def store_rows(self, step: Group, output: Output) -> None:
        """Put the rows of ``step``'s reply at their inputs' places."""
        rows = rows_of(output)
        if output.more:
            for kept, more in zip(self.more, more_rows(output), strict=True):
                for item, row in zip(step.items, more, strict=True):
                    kept[item.index] = row
        if len(rows) == len(self.rows):
            # One request held every input, in input order.
            self.rows = rows  # type: ignore[assignment]
            return
        for item, row in zip(step.items, rows, strict=True):
            self.rows[item.index] = row

    def served(self, identity: str) -> None:
        """Every row is stored; ``identity`` is the vector space they are in."""
        self.identity = identity

    def fail(self, error: SynapseError) -> None:
        if not self.done.is_set():
            self.error = error
            self.end()

    def end(self) -> None:
        """Set ``done``, then tell ``on_end`` (once)."""
        self.done.set()
        # Dropped before it is called: it holds the call, and left in place
        # that cycle would keep the call (texts, plan, rows) until a full
        # collection instead of freeing it with its caller.
        hook, self.on_end = self.on_end, None
        if hook is not None:
            hook()

    # -- coalescing ------------------------------------------------------------------

    def wait_in(self, queue: Joined) -> None:
        """Queued in ``queue`` to be coalesced, let in past ``max_waiting``:
        when it starts (alone or coalesced, waiting for a permit or not), it
        is not refused as Overloaded after all."""
        self.admitted, self.joined = True, queue

    def unjoin(self) -> None:
        self.joined = None

    def when_ended(self, hook: Callable[[], None]) -> None:
        self.on_end = hook


@attrs.define(eq=False)
class Coalesced(Call):
    """A call serving its callers' calls: their inputs in one plan, in
    arrival order, and each caller's rows handed back to it. What its waits
    would end in at the deadline (``CapacityExhausted`` while waiting for
    lane room, say) is what each caller's wait ends in too."""

    callers: list[Call] = attrs.field(factory=list)
    #: how many of ``callers`` gave up
    # Invariant: gone == len(callers) ⇒ abandoned.
    gone: int = 0

    @classmethod
    def of(cls, callers: list[Call], done: OneShot) -> Coalesced:
        first = callers[0].plan
        items: list[Item] = []
        for caller in callers:
            base = len(items)
            items.extend(
                Item(base + item.index, item.text, item.count, item.length, item.ids)
                for item in caller.plan.items
            )
        # Checked against the lowest ceiling any caller was planned for (None:
        # one was not checked, so the worker's ceiling is checked again).
        ceilings = [caller.plan.ceiling for caller in callers]
        ceiling = None if None in ceilings else min(c for c in ceilings if c is not None)
        plan = Plan(first.model, first.task, tuple(items), first.tokenizer, ceiling=ceiling)
        # It runs to the latest deadline; each caller still waits to its own.
        deadline = max((caller.deadline for caller in callers), key=lambda d: d.when)
        call = cls.new(plan, deadline, done, joined([caller.trace for caller in callers]))
        call.callers = callers
        call.admitted = True  # its callers were let in already
        for caller in callers:
            caller.joined = call
        return call

    def left(self, call: Call) -> None:
        self.gone += 1
        if self.gone == len(self.callers):
            self.abandoned = True  # nobody is waiting: start nothing new

    def note_expiry(self, error: SynapseError | None) -> None:
        self.expiry = error
        for caller in self.callers:
            caller.expiry = error

    def unlink(self) -> None:
        """The call has ended: its callers' links back to it go (a cycle,
        freed only by a full collection otherwise)."""
        for caller in self.callers:
            caller.joined = None

    def settle(self) -> None:
        """Give each caller its rows, or this call's error."""
        self.unlink()
        start = 0
        for caller in self.callers:
            end = start + len(caller.rows)
            if self.error is None:
                caller.rows = self.rows[start:end]
                caller.more = [rows[start:end] for rows in self.more]
                caller.identity = self.identity
            else:
                caller.error = self.error
            caller.done.set()
            start = end
