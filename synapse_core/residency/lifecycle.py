"""A lane supervisor's worker lifecycle: boot, connect, watch, recover, stop, retire.

:class:`Lifecycle` holds the supervisor's state; :class:`~.admission.Admission`
adds leases on top of it. Only these two modules (and ``Supervisor``'s own
methods) assign to a supervisor or to a :class:`~.worker.Worker`.

# Invariant: ``worker.generation`` only grows, by one per connected launch;
#   ``channel``, ``process`` and ``hello`` belong to that generation.
# Invariant: ``phase is READY`` iff the current generation said hello and no
#   fault of it has been reported; STARTING and RECOVERING always settle (to
#   READY, FAILED, EXITED or EXIT_UNCONFIRMED), also on cancellation.
# Invariant: once ``retiring`` is set it stays set, no new lease is granted
#   and no replacement generation connects.
# Invariant: a worker's reservations are refunded only once the exit of the
#   process that held them is confirmed (``_refund_all``); a process whose exit
#   could not be confirmed is ``lingering`` and keeps them charged.
# Invariant: a worker in phase EXITED holds no reservation on its lane.
# Invariant: at most one recovery runs per generation (``report_fault`` starts
#   it only from READY, for the current generation).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable
from functools import partial

import anyio
from anyio.abc import TaskGroup

from ..channel import FramedChannel
from ..config import HostConfig
from ..deadline import Clock, Deadline, wait_bounded
from ..errors import (
    ChannelClosed,
    DeadlineExceeded,
    ExchangeTimeout,
    ExitUnconfirmed,
    LaneLocked,
    ProtocolError,
    Retired,
    WireError,
    WorkerFault,
)
from ..observation import (
    Event,
    ShapeRefunded,
    WorkerExited,
    WorkerFaulted,
    WorkerStarted,
)
from ..plugins import PluginHost
from ..process import confirm_exit, wait_gone
from ..transport import LaunchRequest, WorkerProcess
from ..wire import PROTOCOL_VERSION, Codec, Frame, Hello, Shutdown, WorkerFrame
from .lane import Backlog, Lane
from .worker import Phase, Worker

CHANNEL_FAULTS = (ChannelClosed, ExchangeTimeout, WireError)


class Lifecycle:
    """Starts, watches, recovers and stops the workers of one lane."""

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
