"""One call's state, from its plan to its result, and the results callers get.

A :class:`Call` is created by the host and ended by the serving path
(:mod:`synapse_core.serving`); a coalesced call (:mod:`synapse_core.coalesce`)
is a call whose plan holds the inputs of several callers' calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, Self

import attrs

from .channel import Exchange
from .deadline import Deadline
from .errors import SynapseError
from .handoff import OneShot
from .plan import Group, Plan
from .residency.supervisor import Lease
from .wire import Infer


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


@attrs.define(eq=False)
class Call:
    plan: Plan
    deadline: Deadline
    rows: list[list[float] | None]
    done: OneShot
    error: SynapseError | None = None
    identity: str = ""
    #: the caller is gone (cancelled or past its deadline): start nothing new
    abandoned: bool = False
    #: what the wait under way ends in at the deadline (default DeadlineExceeded)
    expiry: SynapseError | None = None
    # What the call holds, whether the head start or the detached task took it.
    permit: bool = False
    #: counted in ``Backlog.waiting`` until it holds the permit
    queued: bool = False
    #: let in past ``max_waiting`` already (queued to be coalesced): a later
    #: wait is never refused with ``Overloaded``
    admitted: bool = False
    entered: bool = False
    #: the requests to send: each a batch-sized chunk of one bucket group
    steps: list[Group] | None = None
    lease: Lease | None = None
    #: the first request, begun by the head start and not yet finished
    begun: tuple[Infer, Exchange] | None = None
    #: the coalesced call (or its queue) this call is served in, if any
    joined: Joined | None = None
    #: told once the call has ended, whichever way (the coalescing queue moves on)
    on_end: Callable[[], None] | None = None

    @classmethod
    def new(cls, plan: Plan, deadline: Deadline, done: OneShot) -> Self:
        return cls(plan, deadline, [None] * len(plan.items), done)

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
