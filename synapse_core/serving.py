"""Running a composed call in a detached task that owns all of its resources.

The task, not the caller, holds the execution permit, the catalog guard
(in-flight count), and one lease at a time (what a call holds is kept, and
let go of, by the call itself: :mod:`synapse_core.call`). A cancelled caller
abandons the call: the current exchange's reply is drained, ownership is
released, and no later group starts. A healthy worker is never restarted
for it.

One start route. The caller gives the task a head start
(:meth:`CallRunner.try_begin`): when permit, worker, an admitted shape's
lease and the channel's turn are all free, the first request is written
before the call's record is made, and permit, lease and guard are taken
after the write; all of it is handed to the call, or nothing is taken. Then
:meth:`CallRunner.start` gives the call what the head start took, or takes
the permit if one is free, or counts the call as waiting. With no await in
between, nothing can cancel the hand-over halfway or see its order, and from
then on the task owns it all as if it had taken it; that bookkeeping and
starting the task overlap the worker's compute.
"""

from __future__ import annotations

import math

import anyio

from .call import Call, HeadStart, undo_head_start
from .channel import Exchange
from .cut import infer_request, is_small, join_next, step_shape, steps_of
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
from .kinds import Kind
from .plan import Group, Plan
from .plugins import PluginHost
from .residency.supervisor import Backlog, Lease, Supervisor
from .residency.worker import Worker
from .wire import TASK_OUTPUT, Frame, Hello, Infer, Output, expect_output, widths_of


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
        # Invariant: permit_waiters == the calls with ``queued`` set, each
        # counted in ``backlog.waiting`` too.
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

    def try_begin(
        self, plan: Plan, deadline: Deadline, supervisor: Supervisor, worker: Worker
    ) -> HeadStart | None:
        """The head start: if nothing has to wait (a permit free with no call
        waiting for one, the worker ready, the first step's shape leasable,
        the channel idle), write the first request before the call's record
        is made, then take the permit, the lease and the guard for it.
        Returns all of it, or ``None`` having taken nothing; what it raises
        (a refusal of the plan on this worker, say) leaves nothing taken."""
        if self.permit_waiters or self.permits.available_tokens < 1:
            return None  # first come, first served
        if not self._ready_now(worker, deadline):
            return None
        try:
            step = steps_of(plan, worker, self.plugins)[0]
            small = is_small(plan, worker)  # may ask the transport: before anything is taken
            shape = step_shape(worker, step)
            begun = supervisor.begin_now(
                worker, shape, lambda request_id: infer_request(plan, request_id, shape, step)
            )
            if begun is None:
                return None
            permit_held = False
            try:
                # Written: nothing may await before these are recorded. The
                # permit is held on behalf of the exchange (there is no call yet).
                self.permits.acquire_on_behalf_of_nowait(begun[1])
                permit_held = True
                lease = supervisor.lease_begun(worker, shape)
            except BaseException as exc:
                undo_head_start(self, supervisor, worker, begun[1], permit_held, exc)
                raise
        except SynapseError:
            raise
        except Exception as exc:  # a bug must reach the caller as one
            raise _internal(plan, exc) from exc
        return HeadStart(begun[1], lease, begun, worker.enter(small))

    def start(self, call: Call, head: HeadStart | None) -> None:
        """The caller's part of starting ``call``, before its detached task
        starts (nothing cancels it halfway): hold what :meth:`try_begin` took;
        else take the permit if one is free and no call waits for one, or
        count the call as waiting (or refuse it with :class:`Overloaded`,
        holding nothing: calls arriving in one burst see each other here)."""
        if head is not None:
            call.hold(head)
            call.trace.admitted(head.lease.shape)  # admitted without a wait
            return
        if not self.permit_waiters:  # first come, first served
            try:
                self.permits.acquire_on_behalf_of_nowait(call)
            except anyio.WouldBlock:
                pass
            else:
                call.took_permit()
                return
        self.enqueue(call.admitted)  # or Overloaded, before the call holds anything
        self._join_line(call)

    def check_room(self) -> None:
        """Raise :class:`Overloaded` if a call arriving now would be refused."""
        if self.backlog.waiting >= self.max_waiting and self.permits.available_tokens < 1:
            raise self._overloaded()

    def enqueue(self, admitted: bool = False) -> None:
        """Count a waiting call, or raise :class:`Overloaded` if ``max_waiting``
        calls wait, unless it was ``admitted`` past that bound already."""
        if self.backlog.waiting >= self.max_waiting and not admitted:
            raise self._overloaded()
        self.backlog.enter()

    def dequeue(self) -> None:
        self.backlog.leave()

    def leave_line(self) -> None:
        """A call counted as waiting for a permit (``call.queued``) waits no more."""
        self.permit_waiters -= 1
        self.backlog.leave()

    def _join_line(self, call: Call) -> None:
        call.queue()
        self.permit_waiters += 1

    def _overloaded(self) -> Overloaded:
        n, cap = self.backlog.waiting, self.max_waiting
        return Overloaded(f"{n} calls are already waiting (max_waiting = {cap}); retry later")

    async def run(self, call: Call, supervisor: Supervisor, worker: Worker) -> None:
        """The detached task. Every outcome ends in ``call``; only the task's own
        cancellation (the host closing) propagates, after the call is ended."""
        error: Exception | None = None
        try:
            if call.permit is None:
                await self._take_permit(call)
            if call.guard is None:
                call.enter(worker, is_small(call.plan, worker))
            await self._serve(call, supervisor, worker)
        except Exception as exc:
            error = exc
        except BaseException:  # cancelled: the host is closing
            error = Retired.host_closing(call.plan.model)
            raise
        finally:
            self._end(call, supervisor, error)

    def _end(self, call: Call, supervisor: Supervisor, error: Exception | None) -> None:
        """Let go of everything the call holds, then report its outcome."""
        call.release(self, supervisor)
        if isinstance(error, SynapseError):
            call.fail(error)
        elif error is not None:  # a bug must not take the host's task group down
            call.fail(_internal(call.plan, error))
        call.end()

    async def _take_permit(self, call: Call) -> None:
        """The module-wide execution permit, waited for within the deadline by
        a call counted as waiting (``call.queued``) since it started."""
        if not call.queued:
            self.backlog.enter()  # never refused here: the caller's part let it in
            self._join_line(call)
        await wait_bounded(
            lambda: self.permits.acquire_on_behalf_of(call),
            call.deadline,
            self.clock,
            DeadlineExceeded("deadline passed waiting for an execution permit"),
        )
        if call.took_permit():
            self.leave_line()

    def _ready_now(self, worker: Worker, deadline: Deadline) -> bool:
        """Whether a call could start on ``worker`` now, without waiting."""
        return worker.takes_work and not deadline.expired(self.clock)

    async def _serve(self, call: Call, supervisor: Supervisor, worker: Worker) -> None:
        """Each step in turn: begin its request (unless the head start did),
        then finish it and check the reply; the rows are stored while the next
        request runs."""
        plan = call.plan
        if call.begun is None:
            await supervisor.wait_ready(worker, call.deadline)
            steps = steps_of(plan, worker, self.plugins)
        else:
            # The steps the head start cut: it began the first of them.
            kept = plan.steps
            assert kept is not None
            steps = kept
        hello = worker.hello
        assert hello is not None
        width, widths = output_widths(plan, hello)
        checked: tuple[Group, Output] | None = None  # rows checked but not yet stored
        for index, step in enumerate(steps):
            step = join_next(steps, index, worker)  # may join the steps after it
            # The request under way is kept in ``call.begun`` until its reply
            # is awaited, so whatever happens in between lets go of it. One
            # begun by the head start is drained even if the caller is gone.
            if call.begun is None and not await self._begin_step(call, supervisor, worker, step):
                return  # the caller is gone: start nothing new
            lease = call.lease
            assert lease is not None
            # While this request runs: store the last reply's rows, encode the next.
            if checked is not None:
                call.store_rows(*checked)
                checked = None
            if index + 1 < len(steps):
                plan.encode_ahead(steps[index + 1].items)
            request, exchange = call.take_begun()
            try:
                reply: Frame | Fault = await supervisor.finish(lease, exchange)
            except Fault as exc:
                reply = exc
            call.trace.exchanged(request, reply, worker.worker_id, lease.generation)
            checked = (
                step,
                self._finish_step(call, supervisor, worker, request, reply, width, widths),
            )
        if checked is not None:
            call.store_rows(*checked)
        call.served(hello.identity)

    async def _begin_step(
        self, call: Call, supervisor: Supervisor, worker: Worker, step: Group
    ) -> bool:
        """Lease ``step``'s shape (one lease at a time) and begin its request,
        within the deadline; False if the caller gave up before it was sent."""
        shape = step_shape(worker, step)
        lease = call.lease
        if lease is not None and lease.shape != shape:
            call.drop_lease(supervisor)  # one lease at a time
            lease = None
        if call.abandoned:
            return False
        self._check_deadline(call, "before the next group started")
        if lease is None:
            lease = call.leased(
                await supervisor.lease(worker, shape, call.deadline, call.note_expiry)
            )
            self._check_deadline(call, "during admission; no inference was sent")
            if call.is_abandoned():
                return False
            call.trace.admitted(lease.shape)
        request = infer_request(call.plan, supervisor.next_request_id(), lease.shape, step)
        try:
            call.began((request, await self._begin(call, supervisor, lease, request)))
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
        widths: tuple[int, ...],
    ) -> Output:
        """The reply to ``request``, checked; a fault, a malformed reply or one
        that came after the deadline ends the call instead."""
        lease = call.lease
        assert lease is not None
        if isinstance(reply, Fault):
            raise self._faulted(call, supervisor, worker, reply)
        try:
            output = expect_output(reply, request, len(request.sequences), width, widths)
        except WireError as exc:
            fault = Fault(lease.generation, f"malformed reply: {exc}", written=True)
        else:
            # A reply that arrives after the deadline is drained but discarded.
            self._check_deadline(call, "while the worker was answering; its reply was discarded")
            return output
        raise self._faulted(call, supervisor, worker, fault)

    @staticmethod
    def _faulted(
        call: Call, supervisor: Supervisor, worker: Worker, fault: Fault
    ) -> OutcomeUnknown | WorkerFault:
        """Let go of the call's lease, report ``fault``, and return the error
        the call ends in (off the hot path: only a fault calls it)."""
        # Recovery starts only once the lease is released.
        call.drop_lease(supervisor)
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


def output_widths(plan: Plan, hello: Hello) -> tuple[int, tuple[int, ...]]:
    """The width of the first output ``plan`` asks of ``hello``'s worker, and
    of the others (the cut refused a plan asking for one it lacks)."""
    if not plan.outputs:  # the task's own output: as a worker of protocol 2 sends it
        return (hello.dims if TASK_OUTPUT[plan.task] is Kind.DENSE else 1), ()
    widths = widths_of(hello)
    first, *more = (widths[kind] for kind in plan.outputs)
    return first, tuple(more)


def _internal(plan: Plan, exc: Exception) -> InternalError:
    return InternalError(f"internal error serving {plan.model!r}: {exc!r}")
