"""Coalescing: small embed calls that would wait for a busy model share a request.

With ``coalesce = true``, a model serves at most one call of this queue at a
time per worker (``workers``). A small embed call arriving while that many
run waits here (counted as waiting, so ``max_waiting`` bounds the queue);
when a running call ends, everything queued starts as one coalesced call
whose plan holds every waiting caller's inputs, up to the worker's batch
size. Each caller then gets its own rows, in its own order, or the
coalesced call's error: a fault while a shared request ran reaches every
caller in it as ``OutcomeUnknown`` (each of them may have run), and none is
replayed.

What stays per caller: refusals (each call is planned, and refused, alone
before it joins; a coalesced call refused or rejected by the worker as a
whole starts each of its calls alone, so the outcome reaches only the
caller whose input caused it), its deadline (a caller past it gets ``DeadlineExceeded``
while the others are served; the coalesced call runs to the latest of their
deadlines), and cancellation (a caller that gives up leaves the queue, and a
coalesced call all of whose callers gave up starts nothing new).

A call only joins if every input is already encoded (a small call is, at
planning), so building the shared request cannot fail on one caller's text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import anyio

from .call import Call, Coalesced
from .errors import InternalError, Refused, SynapseError, WorkerRejected
from .plan import Plan

if TYPE_CHECKING:
    from .cut import Selection
    from .residency.worker import Worker

#: most inputs a coalesced call takes before the worker has said its batch
#: size: a guess that bounds the first shared request (a worker that takes
#: fewer gets it cut into several requests, still correct)
BEFORE_HELLO = 32


class Line(Protocol):
    """The host's count of waiting calls (``max_waiting`` bounds it)."""

    def enqueue(self) -> None:
        """Count one more waiting call, or raise ``Overloaded`` if that is too many."""

    def dequeue(self) -> None:
        """Count one waiting call less."""


class Launcher(Protocol):
    """What a coalescer asks of the route that starts the host's calls
    (:class:`~synapse_core.starting.Starts`)."""

    @property
    def line(self) -> Line:
        """The host's count of waiting calls, which queued calls are counted in."""

    def launch(self, call: Call) -> None:
        """Start ``call`` as any call starts (raising what its head start raises)."""

    def first_worker(self, model: str) -> Worker | None:
        """``model``'s first live worker, if any."""

    def selection(self, worker: Worker) -> Selection:
        """How a call picks buckets on ``worker`` (to count the positions queued
        calls take)."""


class Coalescer:
    """The queue of one model's small embed calls; see the module docstring.

    ``starts`` is the route that starts the host's calls; ``model`` the
    queue's model; ``budget`` the most positions one of its requests
    carries (``None``: no bound); ``slots`` how many of this queue's calls
    may run at once (the model's workers).
    """

    def __init__(
        self, starts: Launcher, model: str, budget: int | None = None, slots: int = 1
    ) -> None:
        self._starts = starts
        self._model = model
        self._line = starts.line
        self._budget = budget
        self._slots = slots
        # Invariant: at most ``slots`` calls, each started and not yet ended.
        self.running: list[Call] = []
        # Invariant: each queued call is joined to this queue (``joined is
        # self``), admitted, and counted once in the line.
        self.queue: list[Call] = []
        self._dispatching = False
        self._closed: SynapseError | None = None

    def joins(self, plan: Plan) -> bool:
        """Whether a call of ``plan`` may be served with others: an embed call
        whose inputs are all encoded already and that fits the budget of one
        request. A call over it is cut into several requests, between which
        other calls get the worker; as the queue's running call it would
        hold every queued call back until its last request.

        Whether a call has every id at planning depends on ``plan.EAGER_TEXTS``
        (8) where the tokenizer counts: a call of more texts is only counted
        then, so it does not join (a tokenizer that does not count, the CPU
        lane's, encodes every call while planning it); building the shared
        request then never runs a tokenizer that could fail on one caller's
        text."""
        items = plan.items
        if plan.task != "embed" or plan.outputs or not all(item.ids is not None for item in items):
            return False
        budget = self._budget
        return budget is None or plan.within(budget)

    def submit(self, call: Call) -> None:
        """Start ``call`` now if fewer of this queue's calls than the model's
        workers run, else queue it (or raise ``Overloaded`` when the backlog
        is full)."""
        if self._closed is not None:
            raise self._closed
        if len(self.running) < self._slots:
            self._start(call)
            if call.error is not None:
                raise call.error  # refused by the head start, before any await
            return
        self._line.enqueue()  # raises Overloaded when max_waiting calls wait
        call.wait_in(self)
        self.queue.append(call)

    def left(self, call: Call) -> None:
        """A queued caller gave up: it leaves the queue and stops waiting."""
        if call in self.queue:
            self.queue.remove(call)
            call.unjoin()
            self._line.dequeue()

    def close(self, error: SynapseError) -> None:
        """The host is closing: end every queued call with ``error``."""
        self._closed = error
        queued, self.queue = self.queue, []
        for call in queued:
            call.unjoin()
            self._line.dequeue()
            call.fail(error)

    def _settled(self, call: Call) -> None:
        self.running.remove(call)
        if not self._dispatching:
            self._dispatch()

    def _dispatch(self) -> None:
        # A loop, not recursion: a call that fails at once settles (and comes
        # back here) before _start returns.
        self._dispatching = True
        try:
            while len(self.running) < self._slots and self.queue and self._closed is None:
                calls = self._take()
                self._start(calls[0] if len(calls) == 1 else Coalesced.of(calls, anyio.Event()))
        finally:
            self._dispatching = False

    def _take(self) -> list[Call]:
        """The longest run of queued calls, oldest first, that fits one request
        (its batch size and its budget)."""
        worker = self._starts.first_worker(self._model)
        hello = worker.hello if worker is not None else None
        room = hello.max_batch if hello is not None else BEFORE_HELLO
        budget = self._budget
        selection = (
            self._starts.selection(worker)
            if worker is not None and hello is not None and budget is not None
            else None
        )
        taken = 0
        size = 0
        positions = 0
        for call in self.queue:
            items = call.plan.items
            size += len(items)
            if budget is not None:
                positions += sum(_positions(selection, item.length) for item in items)
            # The oldest call is always taken: over the room alone, it is cut
            # into several requests as any call is.
            if taken and (size > room or (budget is not None and positions > budget)):
                break
            taken += 1
        calls, self.queue = self.queue[:taken], self.queue[taken:]
        for call in calls:
            call.unjoin()
            self._line.dequeue()
        return calls

    def _start(self, call: Call) -> None:
        def settled() -> None:
            if isinstance(call, Coalesced):
                if isinstance(call.error, Refused | WorkerRejected):
                    # Refused as a whole (the worker's buckets are smaller than
                    # declared: nothing was sent), or a shared request rejected
                    # by the worker (no rows, no fault): either may be down to
                    # one caller's input, so each call starts alone and gets
                    # its own outcome, a refusal naming its own input, say.
                    call.unlink()
                    for caller in call.callers:
                        if not caller.abandoned:
                            self._launch_or_fail(caller)
                else:
                    call.settle()
            self._settled(call)

        call.when_ended(settled)
        self.running.append(call)
        self._launch_or_fail(call)  # a call that fails settles: the queue moves on

    def _launch_or_fail(self, call: Call) -> None:
        # Never raises: this also runs when a call settles, in the detached
        # task that ended it, where an exception would reach the host's task group.
        try:
            self._starts.launch(call)
        except SynapseError as exc:
            call.fail(exc)
        except Exception as exc:
            call.fail(
                InternalError(f"internal error starting a call of {call.plan.model!r}: {exc!r}")
            )


def _positions(selection: Selection | None, length: int) -> int:
    """The positions a sequence of ``length`` takes in a request: its bucket."""
    if selection is None or length > selection.ceiling:
        return length  # refused when its call is planned on the worker
    return selection.select(length)
