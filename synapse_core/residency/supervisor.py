"""The residency supervisor of one lane: admission, leases, faults, retirement.

Every grant decision is synchronous (no ``await`` between its check and its
charge), which is what "locked" means on one event loop: a retirement cannot
slip between the re-check and the reservation.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TypeVar

import anyio
import attrs
from anyio.abc import TaskGroup

from ..channel import ChannelClosed, Exchange, ExchangeTimeout, FramedChannel
from ..config import HostConfig
from ..deadline import Clock, Deadline
from ..errors import (
    CapacityExhausted,
    DeadlineExceeded,
    LaneLocked,
    ProtocolError,
    Retired,
    SynapseError,
    WorkerFault,
)
from ..observation import (
    AdmissionCount,
    Event,
    ShapeAdmitted,
    ShapeRefunded,
    WorkerExited,
    WorkerFaulted,
    WorkerInventory,
    WorkerStarted,
)
from ..plugins import PluginHost
from ..process import confirm_exit, wait_gone
from ..transport import LaunchRequest, WorkerProcess
from ..wire import (
    PROTOCOL_VERSION,
    Admit,
    Admitted,
    Codec,
    Evict,
    Evicted,
    Failure,
    Frame,
    Hello,
    Inventory,
    InventoryRequest,
    Shape,
    Shutdown,
    WireError,
    WorkerFrame,
)
from .lane import Lane
from .policy import AdmissionRequest, Refuse, Wait
from .policy import Evict as EvictDecision
from .worker import Phase, Worker

CHANNEL_FAULTS = (ChannelClosed, ExchangeTimeout, WireError)
T = TypeVar("T")


def _unsendable(exc: WireError) -> ProtocolError:
    return ProtocolError(f"the request cannot be sent: {exc}; send fewer or shorter texts per call")


class ExitUnconfirmed(WorkerFault):
    """A launched process could not be confirmed gone: nothing may replace it."""


class Fault(Exception):
    """A fault of one worker generation, seen by one exchange."""

    def __init__(self, generation: int, reason: str, written: bool) -> None:
        super().__init__(reason)
        self.generation = generation
        self.reason = reason
        self.written = written


@attrs.define(eq=False)
class Lease:
    """The right to run exchanges on one admitted shape of one generation."""

    worker: Worker
    generation: int
    shape: Shape
    channel: FramedChannel
    released: bool = False


@attrs.define(eq=False)
class Backlog:
    """Calls waiting for a permit or for lane capacity, host-wide."""

    waiting: int = 0


async def wait_bounded(
    wait: Callable[[], Awaitable[T]], deadline: Deadline, clock: Clock, error: Exception
) -> T:
    """Await ``wait()`` and return its result, but raise ``error`` once
    ``deadline`` passes."""
    if deadline.when == math.inf:
        return await wait()  # no deadline: a cancel scope would only cost time
    remaining = deadline.remaining(clock)
    if remaining <= 0:
        raise error
    with anyio.move_on_after(remaining):
        return await wait()
    raise error


class Supervisor:
    def __init__(
        self,
        lane: Lane,
        plugins: PluginHost,
        config: HostConfig,
        clock: Clock,
        task_group: TaskGroup,
        backlog: Backlog,
    ) -> None:
        self.lane = lane
        self.plugins = plugins
        self.config = config
        self.clock = clock
        self.tg = task_group
        self.backlog = backlog
        self.workers: dict[str, Worker] = {}
        self.admissions = 0
        self._ids = itertools.count(1)
        self._observe = plugins.observer()
        self._certify = config.certify_observation and self._observe is not None
        self._lane_opening: anyio.Lock = anyio.Lock()

    # -- events ------------------------------------------------------------------

    def _emit(self, make: Callable[[], Event]) -> None:
        # Events are built only when someone listens: serving pays nothing otherwise.
        if self._observe is not None:
            try:
                self._observe(make())
            except Exception as exc:  # a broken sink must not take serving down
                self.plugins.problems.append(f"synapse_observe failed: {exc!r}")

    # -- start and readiness ----------------------------------------------------------

    async def wait_ready(self, worker: Worker, deadline: Deadline) -> None:
        """Return once ``worker`` is ready, starting it if it never started."""
        first = True
        while True:
            # Ready returns at once: for a ready worker, retirement is checked in
            # the locked grant decision, not here.
            if worker.phase is Phase.READY:
                return
            if worker.phase is Phase.EXIT_UNCONFIRMED:
                raise WorkerFault(f"model {worker.spec.name!r} is unavailable: {worker.reason}")
            if worker.retiring:
                raise Retired(f"model {worker.spec.name!r} is retiring; it takes no new work")
            match worker.phase:
                case Phase.NEW:
                    self._start_boot(worker)
                case Phase.FAILED if first and worker.generation == 0:
                    self._start_boot(worker)  # a failed first start is retried by a new call
                case Phase.FAILED if isinstance(worker.start_error, LaneLocked):
                    raise LaneLocked(worker.reason)  # keep the type: another host holds the lane
                case Phase.FAILED | Phase.EXITED:
                    raise WorkerFault(f"model {worker.spec.name!r} is unavailable: {worker.reason}")
            await wait_bounded(
                worker.changed,
                deadline,
                self.clock,
                DeadlineExceeded("deadline passed waiting for the worker to start"),
            )
            first = False

    def _start_boot(self, worker: Worker) -> None:
        worker.phase = Phase.STARTING
        worker.start_error = None
        self.tg.start_soon(self._boot, worker, name=f"boot {worker.worker_id}")

    async def _boot(self, worker: Worker) -> None:
        try:
            await self._connect(worker, worker.generation + 1)
        except LaneLocked as exc:
            worker.phase = Phase.FAILED
            worker.reason = str(exc)
            worker.start_error = exc
        except ExitUnconfirmed as exc:
            worker.phase = Phase.EXIT_UNCONFIRMED
            worker.reason = str(exc)
        except Exception as exc:  # every waiter sees the reason; a later call retries
            worker.phase = Phase.FAILED
            worker.reason = f"worker failed to start: {exc}"
        finally:
            # Also on cancellation: never leave a phase that retire() waits out.
            self._settle(worker, Phase.STARTING, "worker start was cancelled")

    def _settle(self, worker: Worker, transient: Phase, reason: str) -> None:
        if worker.phase is transient:
            worker.phase = Phase.FAILED
            worker.reason = worker.reason or reason
        if worker.is_retiring() and worker.phase is Phase.FAILED:
            worker.phase = Phase.EXITED  # nothing of it runs: retirement is complete
        worker.notify()

    async def _open_lane(self, worker: Worker) -> None:
        if not self.lane.info.hardware_lock or self.lane.session is not None:
            return
        async with self._lane_opening:
            if self.lane.session is None:
                self.lane.session = await worker.transport.open_lane(self.lane.info)

    async def _connect(self, worker: Worker, generation: int) -> bool:
        """Launch ``generation`` and wait for its hello; True once it is ready.

        False when the worker started retiring first: no replacement connects.
        """
        await self._open_lane(worker)
        if worker.is_retiring():
            return False
        launched = await worker.transport.launch(
            LaunchRequest(
                model=worker.spec,
                worker_id=worker.worker_id,
                generation=generation,
                lane=self.lane.info,
                lane_session=self.lane.session,
                task_group=self.tg,
            )
        )
        channel = FramedChannel(
            launched.send, launched.receive, Codec(WorkerFrame, self.config.max_frame_bytes)
        )
        try:
            with anyio.fail_after(self.config.exchange_timeout_s):
                hello = await channel.receive()
            self._check_hello(worker, hello, generation)
        except (TimeoutError, *CHANNEL_FAULTS, ProtocolError) as exc:
            await channel.aclose()
            await self._confirm_or_flag(worker, launched.process)
            reason = (
                "no hello within the exchange timeout"
                if isinstance(exc, TimeoutError)
                else str(exc)
            )
            raise WorkerFault(f"worker for {worker.spec.name!r} did not start: {reason}") from None
        if worker.is_retiring():
            # Recovery re-checks retirement before connecting a replacement.
            await channel.aclose()
            await self._confirm_or_flag(worker, launched.process)
            return False
        assert isinstance(hello, Hello)
        worker.generation = generation
        worker.channel = channel
        worker.process = launched.process
        worker.hello = hello
        worker.shapes.clear()
        worker.leases.clear()
        worker.admission_count = 0
        worker.phase = Phase.READY
        worker.reason = ""
        lane, pid = self.lane.lane_id, launched.process.pid
        self._emit(lambda: WorkerStarted(lane, worker.worker_id, generation, worker.spec.name, pid))
        self.tg.start_soon(self._watch, worker, generation, name=f"watch {worker.worker_id}")
        worker.notify()
        return True

    async def _watch(self, worker: Worker, generation: int) -> None:
        """Notice a worker that exits on its own, even while idle, and recover it
        before the next call finds a dead channel."""
        process = worker.process
        assert process is not None
        status = await process.wait()
        if worker.generation == generation and not worker.retiring:
            self.report_fault(worker, generation, f"worker exited on its own with status {status}")

    async def _confirm_or_flag(self, worker: Worker, process: WorkerProcess) -> None:
        """Confirm a never-connected process's exit; if that fails, say so
        until it is gone (:meth:`_confirm_late` keeps watching it)."""
        if not await confirm_exit(process, self.config.exit_grace_s):
            self._linger(worker, process, charged=False)
            raise ExitUnconfirmed(
                f"a worker process (pid {process.pid}) that never connected did not exit "
                "after SIGTERM and SIGKILL; it may still hold the device until it is gone"
            )

    def _linger(self, worker: Worker, process: WorkerProcess, *, charged: bool) -> None:
        """Keep watching a process whose exit could not be confirmed."""
        worker.lingering = process
        self.tg.start_soon(
            self._confirm_late,
            worker,
            worker.generation,
            process,
            charged,
            name=f"confirm exit {worker.worker_id}",
        )

    async def _confirm_late(
        self, worker: Worker, generation: int, process: WorkerProcess, charged: bool
    ) -> None:
        """Once a process whose exit could not be confirmed is gone (it and
        its group), confirm it: refund what it held and let the worker move on.

        ``charged``: the process is the worker's connected generation, whose
        reservations stayed charged; otherwise it never connected.
        """
        await wait_gone(process, self.config.exit_grace_s)
        if worker.lingering is not process:
            return
        worker.lingering = None
        if charged:
            self._emit(lambda: WorkerExited(self.lane.lane_id, worker.worker_id, generation, True))
            self._refund_all(worker)
        if worker.phase is not Phase.EXIT_UNCONFIRMED:
            return
        if worker.retiring:
            worker.phase = Phase.EXITED
        elif charged:
            # Its recovery stopped at the unconfirmed exit: carry on from there.
            worker.phase = Phase.RECOVERING
            worker.notify()
            await self._recover(worker, generation, "its exit was confirmed late", stopped=True)
            return
        else:
            worker.phase = Phase.FAILED
            worker.reason = f"worker failed to start; its process (pid {process.pid}) is now gone"
        worker.notify()

    def _check_hello(self, worker: Worker, frame: Frame, generation: int) -> None:
        if not isinstance(frame, Hello):
            raise ProtocolError(f"expected a hello frame, got {type(frame).__name__}")
        if frame.protocol != PROTOCOL_VERSION:
            raise ProtocolError(
                f"worker speaks protocol {frame.protocol}, this host speaks {PROTOCOL_VERSION}; "
                "install matching versions of synapse-core and the transport plugin"
            )
        if frame.model != worker.spec.name or frame.generation != generation:
            raise ProtocolError(
                f"hello is for {frame.model!r} generation {frame.generation}, "
                f"expected {worker.spec.name!r} generation {generation}"
            )
        if not frame.buckets or frame.dims <= 0 or frame.max_batch <= 0:
            raise ProtocolError("hello reports no buckets, no dims or no batch size")

    # -- admission and leases ------------------------------------------------------------

    def next_request_id(self) -> int:
        return next(self._ids)

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
        from ..errors import DeadlineExceeded

        while True:
            await self.wait_ready(worker, deadline)
            generation = worker.generation
            if shape in worker.shapes:
                return self._grant(worker, generation, shape)
            busy = worker.busy_shapes.get(shape)
            if busy is not None:
                await wait_bounded(
                    busy.wait,
                    deadline,
                    self.clock,
                    DeadlineExceeded("deadline passed waiting for an admission"),
                )
                continue
            if deadline.expired(self.clock):
                raise DeadlineExceeded("deadline passed before admission; nothing was sent")
            decision = self._decide(worker, shape)
            if isinstance(decision, Wait):
                exhausted = CapacityExhausted(
                    f"lane {self.lane.lane_id} had no room for {shape} of "
                    f"{worker.spec.name!r} before the deadline"
                )
                self.backlog.waiting += 1
                note(exhausted)
                try:
                    await wait_bounded(self.lane.changed, deadline, self.clock, exhausted)
                finally:
                    note(None)
                    self.backlog.waiting -= 1
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
        units = self.plugins.admission_cost(worker.spec, shape, view, worker.worker_id)
        if units > self.lane.capacity:
            raise CapacityExhausted(
                f"{shape} of {worker.spec.name!r} needs {units} units; lane "
                f"{self.lane.lane_id} has only {self.lane.capacity}"
            )
        if units <= self.lane.free:
            self.lane.charge(worker.worker_id, worker.generation, shape, units)
            worker.busy_shapes[shape] = anyio.Event()
            return units
        request = AdmissionRequest(
            self.lane.lane_id, worker.worker_id, worker.generation, worker.spec, shape, units
        )
        decision = self.plugins.lane_full(request, view)
        match decision:
            case Wait() | EvictDecision():
                return decision
            case Refuse(reason=reason):
                raise CapacityExhausted(f"lane {self.lane.lane_id} refused {shape}: {reason}")
        raise TypeError(f"synapse_lane_full returned {decision!r}; expected Wait, Evict or Refuse")

    def _evictable(self, leased: set[tuple[str, Shape]]) -> set[tuple[str, Shape]]:
        return {
            (w.worker_id, s)
            for w in self.workers.values()
            if w.phase is Phase.READY and not w.retiring
            for s in w.shapes
            if (w.worker_id, s) not in leased
        }

    def _leased(self) -> set[tuple[str, Shape]]:
        return {
            (w.worker_id, s) for w in self.workers.values() for s, n in w.leases.items() if n
        } | {(w.worker_id, s) for w in self.workers.values() for s in w.busy_shapes}

    async def _admit(self, worker: Worker, generation: int, shape: Shape, units: int) -> None:
        done = worker.busy_shapes[shape]
        channel = worker.channel
        assert channel is not None
        try:
            reply = await self._exchange(
                worker, generation, channel, Admit(self.next_request_id(), shape)
            )
            if isinstance(reply, Failure):
                self.lane.refund(worker.worker_id, shape)  # the worker says it admitted nothing
                raise WorkerFault(f"worker refused to admit {shape}: {reply.message}")
            if not (isinstance(reply, Admitted) and reply.shape == shape):
                raise Fault(generation, f"unexpected reply to admit: {reply!r:.120}", True)
            cold = reply.cold
            worker.shapes[shape] = units
            worker.admission_count += 1
            self.admissions += 1
            lane = self.lane.lane_id
            self._emit(
                lambda: ShapeAdmitted(lane, worker.worker_id, generation, shape, units, cold)
            )
        except Fault as fault:
            # The reservation stays charged until this generation's exit is confirmed.
            restarting = self.report_fault(worker, fault.generation, fault.reason)
            raise WorkerFault(
                f"worker for {worker.spec.name!r} failed while admitting {shape}: {fault.reason}; "
                + ("it is being restarted, retry the call" if restarting else "retry the call")
            ) from None
        finally:
            del worker.busy_shapes[shape]
            done.set()
        if self._certify:
            await self._record_inventory(worker, generation, channel)

    def try_lease(self, worker: Worker, shape: Shape) -> Lease | None:
        """The lease at once if ``worker`` is ready and ``shape`` admitted;
        otherwise ``None`` and :meth:`lease` does what waiting is needed."""
        if worker.phase is Phase.READY and not worker.retiring and shape in worker.shapes:
            return self._grant(worker, worker.generation, shape)
        return None

    def _grant(self, worker: Worker, generation: int, shape: Shape) -> Lease:
        if worker.retiring:
            raise Retired(f"model {worker.spec.name!r} is retiring; it takes no new work")
        channel = worker.channel
        assert channel is not None
        worker.leases[shape] += 1
        self.lane.touch(worker.worker_id, shape, self.clock())
        return Lease(worker, generation, shape, channel)

    def release(self, lease: Lease) -> None:
        if lease.released:
            return
        lease.released = True
        leases = lease.worker.leases
        if lease.generation == lease.worker.generation and leases[lease.shape] > 0:
            leases[lease.shape] -= 1
        self.lane.notify()  # an unleased shape may now be evictable

    async def _exchange(
        self, worker: Worker, generation: int, channel: FramedChannel, frame: Frame
    ) -> Frame:
        """One admission, eviction or inventory exchange; a channel fault, or a
        reply to some other request, is a :class:`Fault` of ``generation``."""
        progress = Exchange()
        try:
            reply = await channel.exchange(frame, self.config.exchange_timeout_s, progress)
        except CHANNEL_FAULTS as exc:
            raise Fault(generation, f"{type(exc).__name__}: {exc}", progress.written) from None
        expected = getattr(frame, "request_id", None)
        if getattr(reply, "request_id", None) != expected:
            raise Fault(generation, f"reply {reply!r:.120} is not for request {expected}", True)
        return reply

    # -- exchanges under a lease ---------------------------------------------------------

    def begin_now(self, lease: Lease, frame: Frame) -> Exchange | None:
        """Begin an exchange under ``lease`` without waiting (``None`` if its
        channel is busy); finish it with :meth:`finish`."""
        try:
            return lease.channel.begin_now(frame)
        except WireError as exc:
            raise _unsendable(exc) from None

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
            return await lease.channel.complete(exchange, self.config.exchange_timeout_s)
        except CHANNEL_FAULTS as exc:
            reason = f"{type(exc).__name__}: {exc}"
            raise Fault(lease.generation, reason, exchange.written) from None

    # -- eviction -----------------------------------------------------------------------

    async def _evict(self, decision: EvictDecision) -> None:
        victim_id, shape = decision.worker_id, decision.shape
        victim = self.workers.get(victim_id)
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
        del victim.shapes[shape]
        victim.busy_shapes[shape] = done = anyio.Event()
        try:
            reply = await self._exchange(
                victim, generation, victim.channel, Evict(self.next_request_id(), shape)
            )
            if not isinstance(reply, Evicted):
                raise Fault(generation, f"unexpected reply to evict: {reply!r:.120}", True)
            victim.admission_count -= 1
            units = self.lane.refund(victim.worker_id, shape)
            self._emit(
                lambda: ShapeRefunded(self.lane.lane_id, victim.worker_id, generation, shape, units)
            )
        except Fault as fault:
            self.report_fault(victim, fault.generation, fault.reason)
        finally:
            del victim.busy_shapes[shape]
            done.set()

    # -- certification ------------------------------------------------------------------------

    async def _record_inventory(
        self, worker: Worker, generation: int, channel: FramedChannel
    ) -> None:
        shapes = None
        reason = ""
        try:
            reply = await self._exchange(
                worker, generation, channel, InventoryRequest(self.next_request_id())
            )
            if isinstance(reply, Inventory):
                shapes = list(reply.shapes)
            else:
                reason = f"unexpected reply {type(reply).__name__}"
        except Fault as fault:
            reason = fault.reason
            self.report_fault(worker, generation, fault.reason)
        lane = self.lane.lane_id
        self._emit(lambda: WorkerInventory(lane, worker.worker_id, generation, shapes, reason))
        self._emit(
            lambda: AdmissionCount(lane, worker.worker_id, generation, worker.admission_count)
        )

    # -- faults and recovery -----------------------------------------------------------------

    def report_fault(self, worker: Worker, generation: int, reason: str) -> bool:
        """Start recovery of ``generation`` unless it is stale or already recovering.

        Returns True when this report started a recovery. Call it only after
        releasing the lease of the exchange that saw the fault.
        """
        if worker.retiring:
            worker.unhealthy = True  # retirement stops it, without waiting politely
            return False
        if generation != worker.generation:
            return False  # stale: that generation is already gone
        if worker.phase is not Phase.READY:
            return False  # this generation is already recovering (or stopping)
        worker.phase = Phase.RECOVERING
        worker.reason = reason
        self._emit(lambda: WorkerFaulted(self.lane.lane_id, worker.worker_id, generation, reason))
        worker.notify()
        self.tg.start_soon(
            self._recover, worker, generation, reason, name=f"recover {worker.worker_id}"
        )
        return True

    async def _stop_process(self, worker: Worker, polite: bool) -> bool:
        """Close the channel and confirm the worker's exit; refund only if confirmed."""
        generation = worker.generation
        channel, process = worker.channel, worker.process
        if channel is not None:
            if polite:
                with (
                    anyio.move_on_after(self.config.exit_grace_s, shield=True),
                    contextlib.suppress(ChannelClosed, WireError),
                ):
                    await channel.send(Shutdown())
            await channel.aclose()
        confirmed = True
        if process is not None:
            if polite:
                with anyio.move_on_after(self.config.exit_grace_s, shield=True):
                    await process.wait()
            confirmed = await confirm_exit(process, self.config.exit_grace_s)
        self._emit(lambda: WorkerExited(self.lane.lane_id, worker.worker_id, generation, confirmed))
        if not confirmed:
            assert process is not None
            worker.phase = Phase.EXIT_UNCONFIRMED
            worker.reason = (
                f"worker pid {process.pid} did not exit after SIGTERM and SIGKILL; its "
                "reservations stay charged until it is gone"
            )
            self._linger(worker, process, charged=True)
            worker.notify()
            return False
        self._refund_all(worker)
        return True

    def _refund_all(self, worker: Worker) -> None:
        """Refund ``worker``'s reservations: its process is confirmed gone."""
        for shape, charge in self.lane.worker_charges(worker.worker_id):
            units = self.lane.refund(worker.worker_id, shape)
            self._emit(
                partial(
                    ShapeRefunded,
                    self.lane.lane_id,
                    worker.worker_id,
                    charge.generation,
                    shape,
                    units,
                )
            )
        worker.shapes.clear()
        worker.channel = None
        worker.process = None

    async def stop_now(self, worker: Worker) -> None:
        """Stop ``worker`` without waiting for its calls (a close that ran out of
        time); its reservations are refunded only once its exit is confirmed."""
        worker.retiring = True
        if worker.phase in (Phase.EXITED, Phase.EXIT_UNCONFIRMED):
            return
        if await self._stop_process(worker, polite=False):
            worker.phase = Phase.EXITED
        worker.notify()

    async def _recover(
        self, worker: Worker, generation: int, reason: str, *, stopped: bool = False
    ) -> None:
        """Stop the faulted generation (unless already ``stopped``), then relaunch."""
        try:
            if stopped or await self._stop_process(worker, polite=False):
                await self._relaunch(worker, generation, reason)
        finally:
            self._settle(worker, Phase.RECOVERING, f"recovery stopped (last fault: {reason})")

    async def _relaunch(self, worker: Worker, generation: int, reason: str) -> None:
        now = self.clock()
        budget = self.config.restart_budget
        worker.restarts = [t for t in worker.restarts if now - t < budget.window_s]
        if len(worker.restarts) >= budget.max_restarts:
            worker.phase = Phase.FAILED
            worker.reason = (
                f"restarted {len(worker.restarts)} times within {budget.window_s:g}s; "
                f"giving up (last fault: {reason}); fix the worker and retire/reload the model"
            )
            worker.notify()
            return
        try:
            # _connect re-checks retirement before launching and before connecting.
            if await self._connect(worker, generation + 1):
                worker.restarts.append(now)
                worker.restart_count += 1
        except ExitUnconfirmed as exc:
            worker.phase = Phase.EXIT_UNCONFIRMED
            worker.reason = str(exc)
        except Exception as exc:
            worker.phase = Phase.FAILED
            worker.reason = f"replacement failed to start: {exc}"

    # -- retirement -----------------------------------------------------------------------

    async def retire(self, worker: Worker) -> None:
        """Stop new leases, drain in-flight work, confirm exit, then refund."""
        worker.retiring = True
        worker.notify()
        self.lane.notify()  # capacity waiters re-check and see the retirement
        while worker.inflight or worker.phase in (Phase.STARTING, Phase.RECOVERING):
            await worker.changed()
        if worker.phase is Phase.READY:
            if await self._stop_process(worker, polite=not worker.unhealthy):
                worker.phase = Phase.EXITED
        elif worker.phase in (Phase.NEW, Phase.FAILED):
            worker.phase = Phase.EXITED
        worker.notify()
