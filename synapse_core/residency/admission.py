"""A lane supervisor's admission: lease, decide, admit, evict, grant, release, inventory.

Every grant decision is synchronous (no ``await`` between its check and its
charge), which is what "locked" means on one event loop: a retirement cannot
slip between the re-check and the reservation. The invariants it keeps are
written at the :class:`~.lane.Lane` and :class:`~.worker.Worker` fields they
govern.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

import attrs

from ..channel import Exchange, FramedChannel
from ..deadline import Deadline, wait_bounded
from ..errors import (
    CapacityExhausted,
    DeadlineExceeded,
    Fault,
    ProtocolError,
    Retired,
    SynapseError,
    WireError,
    WorkerFault,
)
from ..observation import AdmissionCount, ShapeAdmitted, ShapeRefunded, WorkerInventory
from ..wire import (
    Admit,
    Admitted,
    Evict,
    Evicted,
    Failure,
    Frame,
    Infer,
    Inventory,
    InventoryRequest,
    Shape,
)
from .context import Context
from .lane import Backlog, Lane
from .lifecycle import CHANNEL_FAULTS, Readiness
from .policy import AdmissionRequest, Refuse, Wait
from .policy import Evict as EvictDecision
from .worker import Worker


def _leasable(worker: Worker, shape: Shape) -> bool:
    """Whether ``shape`` can be leased on ``worker`` now, without waiting."""
    return worker.takes_work and shape in worker.shapes


def _unsendable(exc: WireError) -> ProtocolError:
    return ProtocolError(f"the request cannot be sent: {exc}; send fewer or shorter texts per call")


@attrs.define(eq=False)
class Lease:
    """The right to run exchanges on one admitted shape of one generation."""

    worker: Worker
    generation: int
    shape: Shape
    channel: FramedChannel
    # Invariant: while ``generation`` is the worker's, counted in
    #   ``worker.leases[shape]`` until set; set once, by ``Admission.release``,
    #   which uncounts it then, so a second release changes nothing.
    released: bool = False


class LeaseWatch(Protocol):
    """Told of every lease of a supervisor as it is granted and as it is
    released, synchronously, in the task that grants or releases it (so a
    context variable of that task says on whose behalf). For tests and
    tracing; it must not raise."""

    def granted(self, lease: Lease) -> None: ...

    def released(self, lease: Lease) -> None: ...


class Admission:
    """Admits shapes on a lane and grants leases on them.

    It reads the supervisor's ``workers`` (victims of an eviction, what is
    leased) and waits for readiness and reports faults through ``lifecycle``.
    """

    def __init__(
        self,
        context: Context,
        lane: Lane,
        workers: Mapping[str, Worker],
        lifecycle: Readiness,
        backlog: Backlog,
    ) -> None:
        self._context = context
        self.lane = lane
        self._workers = workers
        self._lifecycle = lifecycle
        self.backlog = backlog
        #: shapes admitted on this lane so far, for snapshots
        # Invariant: only grows, by one per admission the worker confirmed.
        self.admissions = 0
        # Invariant: told of every grant and release while set, in order.
        self._lease_watch: LeaseWatch | None = None

    def watch_leases(self, watch: LeaseWatch | None) -> None:
        """Tell ``watch`` of every lease from now on (``None``: stop telling)."""
        self._lease_watch = watch

    # -- admission and leases ------------------------------------------------------------

    async def lease(
        self,
        worker: Worker,
        shape: Shape,
        deadline: Deadline,
        note: Callable[[SynapseError | None], None] = lambda error: None,
    ) -> Lease:
        """Admit ``shape`` on ``worker`` if needed, then lease it.

        ``note`` is told which error the wait under way would end in at the
        deadline, so a caller whose own deadline fires first reports the same.
        """
        while True:
            await self._lifecycle.wait_ready(worker, deadline)
            generation = worker.generation
            if shape in worker.shapes:
                return self._grant(worker, generation, shape)
            busy = worker.busy_shapes.get(shape)
            if busy is not None:
                await wait_bounded(
                    busy.wait,
                    deadline,
                    self._context.clock,
                    DeadlineExceeded("deadline passed waiting for an admission"),
                )
                continue
            if deadline.expired(self._context.clock):
                raise DeadlineExceeded("deadline passed before admission; nothing was sent")
            decision = self._decide(worker, shape)
            if isinstance(decision, Wait):
                exhausted = CapacityExhausted(
                    f"lane {self.lane.lane_id} had no room for {shape} of "
                    f"{worker.spec.name!r} before the deadline"
                )
                self.backlog.enter()
                note(exhausted)
                try:
                    await wait_bounded(self.lane.changed, deadline, self._context.clock, exhausted)
                finally:
                    note(None)
                    self.backlog.leave()
                continue
            if isinstance(decision, EvictDecision):
                await self._evict(decision)
                continue
            await self._admit(worker, generation, shape, decision)
            # Loop: the next pass grants the lease only if the worker is still
            # the generation that admitted the shape.

    def _decide(self, worker: Worker, shape: Shape) -> int | Wait | EvictDecision:
        """The locked grant decision: charge and return the units, or wait, or evict."""
        if worker.retiring:
            raise Retired(f"model {worker.spec.name!r} is retiring; it takes no new work")
        leased = self._leased()
        view = self.lane.view(leased, self._evictable(leased))
        units = self._context.plugins.admission_cost(worker.spec, shape, view, worker.worker_id)
        if units > self.lane.capacity:
            raise CapacityExhausted(
                f"{shape} of {worker.spec.name!r} needs {units} units; lane "
                f"{self.lane.lane_id} has only {self.lane.capacity}"
            )
        if units <= self.lane.free:
            self.lane.charge(worker.worker_id, worker.generation, shape, units)
            worker.admitting(shape)
            return units
        request = AdmissionRequest(
            self.lane.lane_id, worker.worker_id, worker.generation, worker.spec, shape, units
        )
        decision = self._context.plugins.lane_full(request, view)
        match decision:
            case Wait() | EvictDecision():
                return decision
            case Refuse(reason=reason):
                raise CapacityExhausted(f"lane {self.lane.lane_id} refused {shape}: {reason}")
        raise TypeError(f"synapse_lane_full returned {decision!r}; expected Wait, Evict or Refuse")

    def _evictable(self, leased: set[tuple[str, Shape]]) -> set[tuple[str, Shape]]:
        return {
            (w.worker_id, s)
            for w in self._workers.values()
            if w.takes_work
            for s in w.shapes
            if (w.worker_id, s) not in leased
        }

    def _leased(self) -> set[tuple[str, Shape]]:
        return {
            (w.worker_id, s) for w in self._workers.values() for s, n in w.leases.items() if n
        } | {(w.worker_id, s) for w in self._workers.values() for s in w.busy_shapes}

    async def _admit(self, worker: Worker, generation: int, shape: Shape, units: int) -> None:
        channel = worker.channel
        assert channel is not None
        try:
            reply = await self._exchange(
                worker, generation, channel, Admit(self._context.next_request_id(), shape)
            )
            if isinstance(reply, Failure):
                self.lane.refund(worker.worker_id, shape)  # the worker says it admitted nothing
                raise WorkerFault(f"worker refused to admit {shape}: {reply.message}")
            if not (isinstance(reply, Admitted) and reply.shape == shape):
                raise Fault(generation, f"unexpected reply to admit: {reply!r:.120}", True)
            cold = reply.cold
            worker.admitted(shape, units)
            self.admissions += 1
            lane = self.lane.lane_id
            self._context.emit(
                lambda: ShapeAdmitted(lane, worker.worker_id, generation, shape, units, cold)
            )
        except Fault as fault:
            # The reservation stays charged until this generation's exit is confirmed.
            restarting = self._lifecycle.report_fault(worker, fault.generation, fault.reason)
            raise WorkerFault(
                f"worker for {worker.spec.name!r} failed while admitting {shape}: {fault.reason}; "
                + ("it is being restarted, retry the call" if restarting else "retry the call")
            ) from None
        finally:
            worker.exchanged(shape)
        if self._context.certify:
            await self._record_inventory(worker, generation, channel)

    def begin_now(
        self, worker: Worker, shape: Shape, request: Callable[[int], Infer]
    ) -> tuple[Infer, Exchange] | None:
        """Begin ``request(request_id)`` at once if ``shape`` could be leased
        now and the channel is idle; ``None`` (nothing written, though a
        request id and the request's encoding may be spent) if either would
        have to wait.

        The lease is not taken here: its caller takes it with
        :meth:`lease_begun` once its own records are made, with no await in
        between, so that no other task can tell the difference and the
        worker's compute overlaps that bookkeeping instead of following it.
        """
        channel = worker.channel
        if channel is None or not _leasable(worker, shape):
            return None
        frame = request(self._context.next_request_id())
        try:
            exchange = channel.begin_now(frame)
        except WireError as exc:
            raise _unsendable(exc) from None
        if exchange is None:
            return None
        return frame, exchange

    def lease_begun(self, worker: Worker, shape: Shape) -> Lease:
        """The lease of a request :meth:`begin_now` wrote, before any await."""
        return self._grant(worker, worker.generation, shape)

    def drop_begun(self, worker: Worker, exchange: Exchange, why: str) -> None:
        """A request was written but its reply will not be read (the records
        of its call failed): give the channel's turn back and recover the
        generation, whose next exchange would otherwise misread that reply."""
        exchange.release()
        self._lifecycle.report_fault(worker, worker.generation, why)

    def _grant(self, worker: Worker, generation: int, shape: Shape) -> Lease:
        if worker.retiring:
            raise Retired(f"model {worker.spec.name!r} is retiring; it takes no new work")
        channel = worker.channel
        assert channel is not None
        worker.lease(shape)
        self.lane.touch(worker.worker_id, shape, self._context.clock())
        lease = Lease(worker, generation, shape, channel)
        if self._lease_watch is not None:
            self._lease_watch.granted(lease)
        return lease

    def release(self, lease: Lease) -> None:
        if lease.released:
            return
        lease.released = True
        if self._lease_watch is not None:
            self._lease_watch.released(lease)
        lease.worker.unlease(lease.generation, lease.shape)
        self.lane.notify()  # an unleased shape may now be evictable

    async def _exchange(
        self, worker: Worker, generation: int, channel: FramedChannel, frame: Frame
    ) -> Frame:
        """One admission, eviction or inventory exchange; a channel fault, or a
        reply to some other request, is a :class:`Fault` of ``generation``."""
        progress = Exchange()
        try:
            reply = await channel.exchange(frame, self._context.config.exchange_timeout_s, progress)
        except CHANNEL_FAULTS as exc:
            raise Fault(generation, f"{type(exc).__name__}: {exc}", progress.written) from None
        expected = getattr(frame, "request_id", None)
        if getattr(reply, "request_id", None) != expected:
            raise Fault(generation, f"reply {reply!r:.120} is not for request {expected}", True)
        return reply

    # -- exchanges under a lease ---------------------------------------------------------

    async def begin(
        self, lease: Lease, frame: Frame, check: Callable[[], None] | None = None
    ) -> Exchange:
        """Begin an exchange under ``lease``, waiting for its channel's turn;
        ``check`` may still call it off once the turn comes (nothing sent)."""
        try:
            return await lease.channel.begin(frame, check)
        except WireError as exc:
            raise _unsendable(exc) from None

    async def finish(self, lease: Lease, exchange: Exchange) -> Frame:
        """The reply of a begun exchange; raises :class:`Fault` on a channel fault."""
        try:
            timeout = self._context.config.exchange_timeout_s
            return await lease.channel.complete(exchange, timeout)
        except CHANNEL_FAULTS as exc:
            reason = f"{type(exc).__name__}: {exc}"
            raise Fault(lease.generation, reason, exchange.written) from None

    # -- eviction -----------------------------------------------------------------------

    async def _evict(self, decision: EvictDecision) -> None:
        victim_id, shape = decision.worker_id, decision.shape
        victim = self._workers.get(victim_id)
        if (
            victim is None
            or shape not in victim.shapes
            or victim.leases[shape]
            or shape in victim.busy_shapes
            or victim.channel is None
        ):
            raise CapacityExhausted(
                f"synapse_lane_full asked to evict {victim_id} {shape}, "
                "which is not an unleased admitted shape"
            )
        generation = victim.generation
        victim.evicting(shape)
        try:
            reply = await self._exchange(
                victim, generation, victim.channel, Evict(self._context.next_request_id(), shape)
            )
            if not isinstance(reply, Evicted):
                raise Fault(generation, f"unexpected reply to evict: {reply!r:.120}", True)
            victim.evicted()
            units = self.lane.refund(victim.worker_id, shape)
            self._context.emit(
                lambda: ShapeRefunded(self.lane.lane_id, victim.worker_id, generation, shape, units)
            )
        except Fault as fault:
            self._lifecycle.report_fault(victim, fault.generation, fault.reason)
        finally:
            victim.exchanged(shape)

    # -- certification ------------------------------------------------------------------------

    async def _record_inventory(
        self, worker: Worker, generation: int, channel: FramedChannel
    ) -> None:
        shapes = None
        reason = ""
        try:
            reply = await self._exchange(
                worker, generation, channel, InventoryRequest(self._context.next_request_id())
            )
            if isinstance(reply, Inventory):
                shapes = list(reply.shapes)
            else:
                reason = f"unexpected reply {type(reply).__name__}"
        except Fault as fault:
            reason = fault.reason
            self._lifecycle.report_fault(worker, generation, fault.reason)
        lane = self.lane.lane_id
        self._context.emit(
            lambda: WorkerInventory(lane, worker.worker_id, generation, shapes, reason)
        )
        self._context.emit(
            lambda: AdmissionCount(lane, worker.worker_id, generation, worker.admission_count)
        )
