"""Running a composed call in a detached task that owns all of its resources.

The task, not the caller, holds the execution permit, the catalog guard
(in-flight count), and one lease at a time. A cancelled caller abandons the
call: the current exchange's reply is drained, ownership is released, and no
later group starts. A healthy worker is never restarted for it.

The caller gives the task a head start: before waking it, the caller takes
whatever is free at once (permit, an admitted shape's lease, the channel's
turn, guard). When all of it is free, the first request is written first,
before the call's record is made, and permit, lease and guard are recorded
after the write. With no await in between, nothing can cancel the hand-over
halfway or see its order, and from then on the task owns it all as if it had
taken it; that bookkeeping and waking the task overlap the worker's compute.
"""

from __future__ import annotations

import math

import anyio

from .call import Call
from .channel import Exchange
from .deadline import Clock, Deadline, wait_bounded
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
from .plan import Group, Plan
from .plugins import PluginHost
from .residency.supervisor import Backlog, Lease, Supervisor
from .residency.worker import Worker
from .steps import HeadStart, infer_request, plan_steps, step_shape, store_rows
from .wire import Frame, Infer, Output, expect_output


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
        #: calls counted as waiting for a permit (``call.queued``), from the
        #: head start on: while any waits, no new call takes one ahead of it
        self.permit_waiters = 0

    async def wait(self, call: Call) -> None:
        """The caller's side: wait for the result within the deadline, and
        raise the error the call ended with, if any."""
        done, deadline = call.done, call.deadline
        try:
            if deadline.when == math.inf:
                await done.wait()  # one coroutine frame less than wait_bounded
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

    def head_start(
        self, plan: Plan, deadline: Deadline, supervisor: Supervisor, worker: Worker
    ) -> HeadStart | Exception | None:
        """Work out a call's steps and write its first request before its
        record is made, if nothing has to wait (a permit free with no call
        waiting for one, the worker ready, the shape leasable, the channel
        idle). Returns both (``begun`` None: nothing written) for :meth:`start`;
        ``None`` if permit or worker is not free; or an exception raised
        before anything was written."""
        free = not self.permit_waiters and self.permits.available_tokens >= 1
        if not (free and self._ready_now(worker, deadline)):
            return None
        try:
            steps = plan_steps(plan, worker, self.plugins)
            step = steps[0]
            shape = step_shape(worker, step)
            begun = supervisor.begin_now(
                worker, shape, lambda request_id: infer_request(plan, request_id, shape, step)
            )
        except Exception as exc:
            return exc
        return HeadStart(steps, shape, begun)

    def start(
        self,
        call: Call,
        supervisor: Supervisor,
        worker: Worker,
        head: HeadStart | Exception | None = None,
    ) -> bool:
        """The rest of the head start, before the detached task wakes (nothing
        cancels it halfway): take for ``call`` permit, lease and guard after
        :meth:`head_start` wrote; else the permit, or count the call as waiting
        (or refuse it with :class:`Overloaded`, holding nothing: calls arriving
        in one burst see each other here), and an admitted shape's lease.
        False when the call already ended with an error."""
        if isinstance(head, Exception):
            self._end(call, supervisor, worker, head)
            return False
        if head is not None and head.begun is not None:
            return self._record_head_start(call, supervisor, worker, head)
        try:
            if self.permit_waiters:
                raise anyio.WouldBlock  # first come, first served
            self.permits.acquire_on_behalf_of_nowait(call)
        except anyio.WouldBlock:
            self.enqueue(call.admitted)  # or Overloaded, before the call holds anything
            self._queue_for_permit(call)
            return True
        call.permit = True
        # A head start that wrote nothing found the worker ready, and its steps stand.
        if head is None and not self._ready_now(worker, call.deadline):
            return True
        try:
            steps = call.steps = (
                plan_steps(call.plan, worker, self.plugins) if head is None else head.steps
            )
            call.lease = supervisor.try_lease(worker, step_shape(worker, steps[0]))
        except Exception as exc:
            self._end(call, supervisor, worker, exc)
            return False
        worker.enter()
        call.entered = True
        return True

    def _record_head_start(
        self, call: Call, supervisor: Supervisor, worker: Worker, head: HeadStart
    ) -> bool:
        """Give ``call`` the request :meth:`head_start` wrote, with the permit
        and lease it found free (nothing has run since)."""
        begun = head.begun
        assert begun is not None
        try:
            self.permits.acquire_on_behalf_of_nowait(call)
            call.permit = True
            call.lease = supervisor.lease_begun(worker, head.shape)
        except Exception as exc:
            try:
                supervisor.drop_begun(worker, begun[1], f"a call's records failed: {exc!r}")
            finally:
                self._end(call, supervisor, worker, exc)
            return False
        call.steps = head.steps
        call.begun = begun
        worker.enter()
        call.entered = True
        return True

    def check_room(self) -> None:
        """Raise :class:`Overloaded` if a call arriving now would be refused."""
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
        n, cap = self.backlog.waiting, self.max_waiting
        return Overloaded(f"{n} calls are already waiting (max_waiting = {cap}); retry later")

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
            self._unqueue(call)
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
            self._queue_for_permit(call)
        await wait_bounded(
            lambda: self.permits.acquire_on_behalf_of(call),
            call.deadline,
            self.clock,
            DeadlineExceeded("deadline passed waiting for an execution permit"),
        )
        call.permit = True
        self._unqueue(call)

    def _ready_now(self, worker: Worker, deadline: Deadline) -> bool:
        """Whether a call could start on ``worker`` now, without waiting."""
        return worker.takes_work and not deadline.expired(self.clock)

    def _queue_for_permit(self, call: Call) -> None:
        call.queued, self.permit_waiters = True, self.permit_waiters + 1

    def _unqueue(self, call: Call) -> None:
        call.queued, self.permit_waiters = False, self.permit_waiters - 1
        self.dequeue()

    async def _serve(self, call: Call, supervisor: Supervisor, worker: Worker) -> None:
        """Each step in turn: begin its request (unless the head start did),
        then finish it and check the reply; the rows are stored while the next
        request runs."""
        plan = call.plan
        if call.steps is None:
            await supervisor.wait_ready(worker, call.deadline)
            call.steps = plan_steps(call.plan, worker, self.plugins)
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
                store_rows(call, *checked)
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
            store_rows(call, *checked)
        call.identity = hello.identity

    async def _begin_step(
        self, call: Call, supervisor: Supervisor, worker: Worker, step: Group
    ) -> bool:
        """Lease ``step``'s shape (one lease at a time) and begin its request,
        within the deadline; False if the caller gave up before it was sent."""
        shape = step_shape(worker, step)
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
        request = infer_request(call.plan, supervisor.next_request_id(), lease.shape, step)
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
