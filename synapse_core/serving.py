"""Running a composed call in a detached task that owns all of its resources.

The task, not the caller, holds the execution permit, the catalog guard
(in-flight count), and one lease at a time. A cancelled caller abandons the
call: the current exchange's reply is drained, ownership is released, and no
later group starts. A healthy worker is never restarted for it.

The caller gives the task a head start: before waking it, the caller takes
whatever is free at once (permit, an admitted shape's lease, the channel's
turn, guard) and writes the first request, recording lease and guard only
after the write. With no await in between, nothing can cancel the hand-over
halfway or see its order, and from then on the task owns it all as if it had
taken it; that bookkeeping and waking the task overlap the worker's compute.
"""

from __future__ import annotations

import math
from typing import cast

import anyio

from .call import Call
from .channel import Exchange
from .deadline import Clock, wait_bounded
from .errors import (
    CallerGone,
    DeadlineExceeded,
    Fault,
    InternalError,
    OutcomeUnknown,
    Overloaded,
    Retired,
    SynapseError,
    WireError,
    WorkerFault,
)
from .handoff import FutureEvent
from .plan import Group, group_by_bucket, over_ceiling
from .plugins import PluginHost
from .residency.supervisor import Backlog, Lease, Supervisor
from .residency.worker import Phase, Selection, Worker
from .wire import Frame, Infer, Output, Shape, expect_output, rows_of


class CallRunner:
    """Executes calls for one host; see the module docstring."""

    def __init__(
        self,
        plugins: PluginHost,
        clock: Clock,
        permits: anyio.CapacityLimiter,
        backlog: Backlog,
        max_waiting: int,
    ) -> None:
        self.plugins = plugins
        self.clock = clock
        self.permits = permits
        self.backlog = backlog
        self.max_waiting = max_waiting

    async def wait(self, call: Call) -> None:
        """The caller's side: wait for the result within the deadline, and
        raise the error the call ended with, if any."""
        done, deadline = call.done, call.deadline
        try:
            if deadline.when == math.inf:
                await done.wait()  # one coroutine frame less than wait_bounded
            elif type(done) is FutureEvent:  # asyncio: a timer, not a cancel scope
                remaining = deadline.when - self.clock()
                if remaining <= 0 or not await done.wait_for(remaining):
                    raise DeadlineExceeded
            else:
                await wait_bounded(done.wait, deadline, self.clock, DeadlineExceeded())
        except DeadlineExceeded:
            call.abandon()  # the detached task drains and releases
            expired = DeadlineExceeded(f"deadline passed before {call.plan.model!r} answered")
            raise (call.error or call.expiry or expired) from None
        except BaseException:
            call.abandon()
            raise
        if call.error is not None:
            raise call.error

    def start(self, call: Call, supervisor: Supervisor, worker: Worker) -> bool:
        """The head start, in the caller's task before the detached task wakes:
        take what is free now and begin the first request.

        Synchronous, so nothing cancels it halfway; what it takes belongs to
        the call from then on, and :meth:`run` carries on from where it
        stopped (the first thing that would have to wait). Waking the
        detached task then overlaps the worker's compute. Returns False when
        the call already ended with an error (in ``call.error``).

        The permit is taken, or the call counted as waiting for it, here and
        not in the detached task: calls arriving in one burst see each other,
        and one that would make more than ``max_waiting`` calls wait is
        refused with :class:`Overloaded` before it holds anything.
        """
        try:
            self.permits.acquire_on_behalf_of_nowait(call)
        except anyio.WouldBlock:
            self.enqueue(call.admitted)  # or Overloaded, before the call holds anything
            call.queued = True
            return True
        call.permit = True
        if worker.phase is not Phase.READY or worker.retiring or call.deadline.expired(self.clock):
            return True
        try:
            steps = call.steps = self._steps(call, worker)
            step = steps[0]
            shape = self._shape(worker, step)
            begun = supervisor.lease_and_begin_now(
                worker, shape, lambda request_id: self._infer(call, request_id, shape, step)
            )
            # From here on the worker computes while the call is recorded.
            if begun is not None:
                call.lease, request, exchange = begun
                call.begun = (request, exchange)
            else:
                call.lease = supervisor.try_lease(worker, shape)
        except Exception as exc:
            self._end(call, supervisor, worker, exc)
            return False
        worker.enter()
        call.entered = True
        return True

    def check_room(self) -> None:
        """Raise :class:`Overloaded` if a call arriving now would be refused
        (for a caller about to create state for a call, before it does)."""
        if self.backlog.waiting >= self.max_waiting and self.permits.available_tokens < 1:
            raise self._overloaded()

    def enqueue(self, admitted: bool = False) -> None:
        """Count a waiting call, or raise :class:`Overloaded` if ``max_waiting``
        calls wait, unless it was ``admitted`` past that bound already."""
        if self.backlog.waiting >= self.max_waiting and not admitted:
            raise self._overloaded()
        self.backlog.waiting += 1

    def dequeue(self) -> None:
        self.backlog.waiting -= 1

    def _overloaded(self) -> Overloaded:
        return Overloaded(
            f"{self.backlog.waiting} calls are already waiting (max_waiting = "
            f"{self.max_waiting}); retry later"
        )

    async def run(self, call: Call, supervisor: Supervisor, worker: Worker) -> None:
        """The detached task. Every outcome ends in ``call``; only the task's own
        cancellation (the host closing) propagates, after the call is ended."""
        error: Exception | None = None
        try:
            if not call.permit:
                await self._take_permit(call)
            if not call.entered:
                worker.enter()
                call.entered = True
            await self._serve(call, supervisor, worker)
        except Exception as exc:
            error = exc
        except BaseException:  # cancelled: the host is closing
            error = Retired.host_closing(call.plan.model)
            raise
        finally:
            self._end(call, supervisor, worker, error)

    def cancel(self, call: Call, supervisor: Supervisor, worker: Worker) -> None:
        """End a call whose detached task will never run (the host is closing)."""
        self._end(call, supervisor, worker, Retired.host_closing(call.plan.model))

    def _end(
        self, call: Call, supervisor: Supervisor, worker: Worker, error: Exception | None
    ) -> None:
        """Let go of everything the call holds, then report its outcome."""
        if call.begun is not None:
            # Only a closing host (or a bug) gets here with a request in flight;
            # a late reply then fails the next exchange's request-id check.
            call.begun[1].release()
            call.begun = None
        if call.lease is not None:
            supervisor.release(call.lease)
            call.lease = None
        if call.entered:
            call.entered = False
            worker.leave()
        if call.permit:
            call.permit = False
            self.permits.release_on_behalf_of(call)
        elif call.queued:
            call.queued = False
            self.dequeue()
        if isinstance(error, SynapseError):
            call.fail(error)
        elif error is not None:  # a bug must not take the host's task group down
            call.fail(InternalError(f"internal error serving {call.plan.model!r}: {error!r}"))
        call.end()

    async def _take_permit(self, call: Call) -> None:
        """The module-wide execution permit, waited for within the deadline by
        a call counted as waiting (``call.queued``) since its head start."""
        if not call.queued:
            self.backlog.waiting += 1
            call.queued = True
        await wait_bounded(
            lambda: self.permits.acquire_on_behalf_of(call),
            call.deadline,
            self.clock,
            DeadlineExceeded("deadline passed waiting for an execution permit"),
        )
        call.permit = True
        call.queued = False
        self.dequeue()

    def _steps(self, call: Call, worker: Worker) -> list[Group]:
        """The call's requests, smallest bucket first: batch-sized chunks of its groups."""
        plan = call.plan
        hello = worker.hello
        assert hello is not None
        selection = worker.selection
        if (
            selection is None
            or selection.hello is not hello
            or selection.plugins_version != self.plugins.version
        ):
            selection = worker.remember(
                Selection(
                    hello,
                    self.plugins.version,
                    self.plugins.bucket_selector(hello.buckets, worker.spec),
                    worker.ceiling,
                )
            )
        longest = plan.longest
        if longest.length > selection.ceiling:
            raise over_ceiling(plan.model, longest, selection.ceiling, pair=plan.query is not None)
        return group_by_bucket(plan.items, selection.select, hello.max_batch)

    @staticmethod
    def _shape(worker: Worker, step: Group) -> Shape:
        assert worker.hello is not None
        return Shape(step.bucket, worker.hello.max_batch)

    @classmethod
    def _request(cls, call: Call, supervisor: Supervisor, lease: Lease, step: Group) -> Infer:
        return cls._infer(call, supervisor.next_request_id(), lease.shape, step)

    @staticmethod
    def _infer(call: Call, request_id: int, shape: Shape, step: Group) -> Infer:
        plan = call.plan
        return Infer(
            request_id,
            shape,
            plan.task,  # type: ignore[arg-type]
            plan.encode(step.items),
            plan.query,
        )

    async def _serve(self, call: Call, supervisor: Supervisor, worker: Worker) -> None:
        """Each step in turn: begin its request (unless the head start did),
        then finish it and check the reply; the rows are stored while the next
        request runs."""
        plan = call.plan
        if call.steps is None:
            await supervisor.wait_ready(worker, call.deadline)
            call.steps = self._steps(call, worker)
        steps = call.steps
        hello = worker.hello
        assert hello is not None
        width = hello.dims if plan.task == "embed" else 1
        checked: tuple[Group, Output] | None = None  # rows checked but not yet stored
        for index, step in enumerate(steps):
            # The request under way is kept in ``call.begun`` until its reply
            # is awaited, so whatever happens in between lets go of it. One
            # begun by the head start is drained even if the caller is gone.
            if call.begun is None and not await self._begin_step(call, supervisor, worker, step):
                return  # the caller is gone: start nothing new
            lease, begun = call.lease, call.begun
            assert lease is not None and begun is not None
            # While this request runs: store the last reply's rows, encode the next.
            if checked is not None:
                self._store(call, *checked)
                checked = None
            if index + 1 < len(steps):
                plan.encode_ahead(steps[index + 1].items)
            (request, exchange), call.begun = begun, None
            try:
                reply: Frame | Fault = await supervisor.finish(lease, exchange)
            except Fault as exc:
                reply = exc
            checked = (step, self._finish_step(call, supervisor, worker, request, reply, width))
        if checked is not None:
            self._store(call, *checked)
        call.identity = hello.identity

    async def _begin_step(
        self, call: Call, supervisor: Supervisor, worker: Worker, step: Group
    ) -> bool:
        """Lease ``step``'s shape (one lease at a time) and begin its request,
        within the deadline; False if the caller gave up before it was sent."""
        shape = self._shape(worker, step)
        lease = call.lease
        if lease is not None and lease.shape != shape:
            supervisor.release(lease)  # one lease at a time
            lease = call.lease = None
        if call.abandoned:
            return False
        self._check_deadline(call, "before the next group started")
        if lease is None:
            lease = call.lease = await supervisor.lease(
                worker, shape, call.deadline, call.note_expiry
            )
            self._check_deadline(call, "during admission; no inference was sent")
            if call.is_abandoned():
                return False
        request = self._request(call, supervisor, lease, step)
        try:
            call.begun = (request, await self._begin(call, supervisor, lease, request))
        except CallerGone:
            return False
        return True

    def _finish_step(
        self,
        call: Call,
        supervisor: Supervisor,
        worker: Worker,
        request: Infer,
        reply: Frame | Fault,
        width: int,
    ) -> Output:
        """The reply to ``request``, checked; a fault, a malformed reply or one
        that came after the deadline ends the call instead."""
        lease = call.lease
        assert lease is not None
        if isinstance(reply, Fault):
            raise self._faulted(call, supervisor, worker, lease, reply)
        try:
            output = expect_output(reply, request, len(request.sequences), width)
        except WireError as exc:
            fault = Fault(lease.generation, f"malformed reply: {exc}", written=True)
        else:
            # A reply that arrives after the deadline is drained but discarded.
            self._check_deadline(call, "while the worker was answering; its reply was discarded")
            return output
        raise self._faulted(call, supervisor, worker, lease, fault)

    @staticmethod
    def _faulted(
        call: Call, supervisor: Supervisor, worker: Worker, lease: Lease, fault: Fault
    ) -> OutcomeUnknown | WorkerFault:
        """Let go of the call's lease, report ``fault``, and return the error
        the call ends in (off the hot path: only a fault calls it)."""
        # Recovery starts only once the lease is released.
        supervisor.release(lease)
        call.lease = None
        supervisor.report_fault(worker, fault.generation, fault.reason)
        model = call.plan.model
        if fault.written:
            return OutcomeUnknown(
                f"worker for {model!r} failed after receiving the request "
                f"({fault.reason}); it may have run and is not replayed"
            )
        return WorkerFault(f"worker for {model!r} failed: {fault.reason}; retry the call")

    @staticmethod
    def _store(call: Call, step: Group, output: Output) -> None:
        rows = rows_of(output)
        if len(rows) == len(call.rows):
            # One request held every input, in input order.
            call.rows = cast(list[list[float] | None], rows)
            return
        for item, row in zip(step.items, rows, strict=True):
            call.rows[item.index] = row

    async def _begin(
        self, call: Call, supervisor: Supervisor, lease: Lease, request: Infer
    ) -> Exchange:
        """Begin ``request`` once the channel is free, within the deadline; the
        call is re-checked when the turn comes, so a caller that gave up while
        waiting sends nothing (:class:`CallerGone`)."""

        def check() -> None:
            if call.abandoned:
                raise CallerGone
            self._check_deadline(call, "waiting for the worker's channel; nothing was sent")

        return await wait_bounded(
            lambda: supervisor.begin(lease, request, check),
            call.deadline,
            self.clock,
            DeadlineExceeded("deadline passed waiting for the worker's channel; nothing was sent"),
        )

    def _check_deadline(self, call: Call, when: str) -> None:
        if call.deadline.expired(self.clock):
            raise DeadlineExceeded(f"deadline passed {when}")
