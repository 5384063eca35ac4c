"""A lane supervisor's worker lifecycle: boot, connect, watch, recover, retire.

:class:`Lifecycle` starts workers and keeps them running; it stops a process
and confirms its exit through its :class:`~.exits.Exits`. The invariants it
keeps are written at the :class:`~.worker.Worker` fields they govern.
"""

from __future__ import annotations

from typing import Protocol

import anyio

from ..channel import FramedChannel
from ..deadline import Deadline, wait_bounded
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
from ..observation import WorkerFaulted, WorkerStarted
from ..transport import LaunchRequest
from ..wire import MAX_BATCH, PROTOCOL_VERSION, Codec, Frame, Hello, WorkerFrame
from . import logbook
from .context import Context
from .exits import Exits
from .lane import Lane
from .worker import Phase, Worker

CHANNEL_FAULTS = (ChannelClosed, ExchangeTimeout, WireError)
#: how long after a failed first start a call may start the worker again,
#: doubled for each failure still within the restart budget's window, up to
#: START_BACKOFF_MAX_S; meanwhile calls get the failure's reason at once
START_BACKOFF_S = 1.0
START_BACKOFF_MAX_S = 30.0
#: how long a worker that closed its channel before its hello is given to
#: exit by itself (printing its traceback) before it is stopped
EXITING_WAIT_S = 1.0


class Readiness(Protocol):
    """What admission needs of the lifecycle: a ready worker, and a fault told."""

    async def wait_ready(self, worker: Worker, deadline: Deadline) -> None: ...

    def report_fault(self, worker: Worker, generation: int, reason: str) -> bool: ...


class Lifecycle:
    """Starts, watches, recovers and retires the workers of one lane."""

    def __init__(self, context: Context, lane: Lane, exits: Exits) -> None:
        self._context = context
        self._lane = lane
        self._exits = exits
        # Invariant: held by whoever opens the lane's session, so a
        #   hardware-locked lane's session is opened once, not once per worker.
        self._lane_opening = anyio.Lock()

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
                case Phase.FAILED if (
                    first
                    and worker.generation == 0
                    and not isinstance(worker.start_error, LaneLocked)
                ):
                    self._retry_start(worker)  # a failed first start is retried by a new call
                case Phase.FAILED if first and worker.generation == 0:
                    self._start_boot(worker)  # the lane's other host may have let go of it
                case Phase.FAILED if isinstance(worker.start_error, LaneLocked):
                    raise LaneLocked(worker.reason)  # keep the type: another host holds the lane
                case Phase.FAILED | Phase.EXITED:
                    raise WorkerFault(f"model {worker.spec.name!r} is unavailable: {worker.reason}")
            await wait_bounded(
                worker.changed,
                deadline,
                self._context.clock,
                DeadlineExceeded("deadline passed waiting for the worker to start"),
            )
            first = False

    def start(self, worker: Worker) -> None:
        """Start ``worker`` if it never started, without waiting for it: its
        hello, or the reason it failed, reaches whoever waits on it later."""
        if worker.phase is Phase.NEW and not worker.retiring:
            self._start_boot(worker)

    def _retry_start(self, worker: Worker) -> None:
        """Start ``worker`` again after a failed first start, unless its
        failed starts have spent the restart budget or the last one's backoff
        has not passed: then the call gets the failure's reason at once, and
        no process is started for it."""
        now = self._context.clock()
        budget = self._context.config.restart_budget
        failures = worker.prune_restarts(now, budget.window_s)
        name = worker.spec.name
        if failures >= budget.max_restarts and failures:
            raise WorkerFault(
                f"model {name!r} is unavailable: {worker.reason}; it failed to start "
                f"{failures} times within {budget.window_s:g} s (the restart budget), so no "
                f"start is tried until the first of them is {budget.window_s:g} s old; "
                "fix the model and retire/reload it"
            )
        if now < worker.retry_at:
            raise WorkerFault(
                f"model {name!r} is unavailable: {worker.reason}; the next start is tried "
                f"in {worker.retry_at - now:.1f} s"
            )
        self._start_boot(worker)

    def _start_boot(self, worker: Worker) -> None:
        worker.booting()
        self._context.tg.start_soon(self._boot, worker, name=f"boot {worker.worker_id}")

    async def _boot(self, worker: Worker) -> None:
        try:
            await self._connect(worker, worker.generation + 1)
        except LaneLocked as exc:
            worker.fail(str(exc), exc)
        except ExitUnconfirmed as exc:
            worker.unconfirmed(str(exc))
        except Exception as exc:  # every waiter sees the reason; a later call retries
            now = self._context.clock()
            earlier = worker.prune_restarts(now, self._context.config.restart_budget.window_s)
            backoff = min(START_BACKOFF_S * 2**earlier, START_BACKOFF_MAX_S)
            worker.start_failed(f"worker failed to start: {exc}", now, backoff)
            logbook.failed(worker, worker.generation + 1, worker.reason)
        finally:
            # Also on cancellation: never leave a phase that retire() waits out.
            worker.settle(Phase.STARTING, "worker start was cancelled")

    async def _open_lane(self, worker: Worker) -> None:
        if not self._lane.info.hardware_lock or self._lane.session is not None:
            return
        async with self._lane_opening:
            if self._lane.session is None:
                self._lane.opened(await worker.transport.open_lane(self._lane.info))

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
                lane=self._lane.info,
                lane_session=self._lane.session,
                task_group=self._context.tg,
            )
        )
        channel = FramedChannel(
            launched.send,
            launched.receive,
            Codec(WorkerFrame, self._context.config.max_frame_bytes),
        )
        try:
            with anyio.fail_after(self._context.config.exchange_timeout_s):
                hello = await channel.receive()
            self._check_hello(worker, hello, generation)
        except (TimeoutError, *CHANNEL_FAULTS, ProtocolError) as exc:
            await channel.aclose()
            status = None
            if isinstance(exc, ChannelClosed):  # most likely exiting: let its status tell why
                # Shielded as confirm_exit is: a closing host must not skip the confirmation.
                with anyio.move_on_after(EXITING_WAIT_S, shield=True):
                    status = await launched.process.wait()
            await self._exits.confirm_or_flag(worker, launched.process)
            if isinstance(exc, TimeoutError):
                reason = "no hello within the exchange timeout"
            elif isinstance(exc, ChannelClosed):
                reason = _closed_before_hello(exc, status)
            else:
                reason = str(exc)
            raise WorkerFault(f"worker for {worker.spec.name!r} did not start: {reason}") from None
        if worker.is_retiring():
            # Recovery re-checks retirement before connecting a replacement.
            await channel.aclose()
            await self._exits.confirm_or_flag(worker, launched.process)
            return False
        assert isinstance(hello, Hello)
        worker.connected(generation, channel, launched.process, hello)
        lane, pid = self._lane.lane_id, launched.process.pid
        self._context.emit(
            lambda: WorkerStarted(lane, worker.worker_id, generation, worker.spec.name, pid)
        )
        self._context.tg.start_soon(
            self._watch, worker, generation, name=f"watch {worker.worker_id}"
        )
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
        if frame.max_batch > MAX_BATCH:
            raise ProtocolError(
                f"hello reports max_batch {frame.max_batch}, over the {MAX_BATCH} inputs "
                "a host sends a worker at once; the worker must report a batch it can run"
            )
        if frame.dims * 4 > self._context.config.max_frame_bytes:
            raise ProtocolError(
                f"hello reports dims {frame.dims}: one float32 vector of it is over the "
                f"frame limit of {self._context.config.max_frame_bytes} bytes (max_frame_bytes)"
            )

    # -- faults and recovery -----------------------------------------------------------------

    def report_fault(self, worker: Worker, generation: int, reason: str) -> bool:
        """Start recovery of ``generation`` unless it is stale or already recovering.

        Returns True when this report started a recovery. Call it only after
        releasing the lease of the exchange that saw the fault.
        """
        if not worker.fault(generation, reason):
            return False
        self._context.emit(
            lambda: WorkerFaulted(self._lane.lane_id, worker.worker_id, generation, reason)
        )
        worker.notify()
        self._context.tg.start_soon(
            self._recover_fault, worker, generation, reason, name=f"recover {worker.worker_id}"
        )
        return True

    async def _recover_fault(self, worker: Worker, generation: int, reason: str) -> None:
        """Log the fault, with the worker's exit status when its channel
        closed because it exited (a worker killed mid-exchange: its status,
        not ``ChannelClosed``, says what happened), then recover it."""
        process = worker.process
        if process is not None and reason.startswith(ChannelClosed.__name__):
            status = process.returncode
            if status is None:
                # Shielded as confirm_exit is; most likely exiting already.
                with anyio.move_on_after(EXITING_WAIT_S, shield=True):
                    status = await process.wait()
            if status is not None:
                reason = f"worker {_exit_how(status)} ({reason})"
                worker.explain(generation, reason)
        logbook.fault(worker, generation, reason)
        await self.recover(worker, generation, reason)

    async def recover(
        self, worker: Worker, generation: int, reason: str, *, stopped: bool = False
    ) -> None:
        """Stop the faulted generation (unless already ``stopped``), then relaunch."""
        try:
            if stopped or await self._exits.stop_process(worker, polite=False):
                await self._relaunch(worker, generation, reason)
        finally:
            worker.settle(Phase.RECOVERING, f"recovery stopped (last fault: {reason})")

    async def resume(self, worker: Worker, generation: int, reason: str) -> None:
        """Carry on a recovery whose stop was confirmed late (``Exits``' resume)."""
        await self.recover(worker, generation, reason, stopped=True)

    async def _relaunch(self, worker: Worker, generation: int, reason: str) -> None:
        now = self._context.clock()
        budget = self._context.config.restart_budget
        restarts = worker.prune_restarts(now, budget.window_s)
        if restarts >= budget.max_restarts:
            worker.fail(
                f"restarted {restarts} times within {budget.window_s:g}s; "
                f"giving up (last fault: {reason}); fix the worker and retire/reload the model"
            )
            logbook.failed(worker, generation, worker.reason)
            worker.notify()
            return
        try:
            # _connect re-checks retirement before launching and before connecting.
            if await self._connect(worker, generation + 1):
                worker.restarted(now)
                cause = f"replaces generation {generation}: {reason}"
                logbook.restart(worker, generation + 1, cause)
        except ExitUnconfirmed as exc:
            worker.unconfirmed(str(exc))
            logbook.failed(worker, generation + 1, worker.reason)
        except Exception as exc:
            worker.fail(f"replacement failed to start: {exc}")
            logbook.failed(worker, generation + 1, worker.reason)

    # -- retirement -----------------------------------------------------------------------

    async def retire(self, worker: Worker) -> None:
        """Stop new leases, drain in-flight work, confirm exit, then refund."""
        worker.retire()
        worker.notify()
        self._lane.notify()  # capacity waiters re-check and see the retirement
        while worker.inflight or worker.phase in (Phase.STARTING, Phase.RECOVERING):
            await worker.changed()
        if worker.phase is Phase.READY:
            if await self._exits.stop_process(worker, polite=not worker.unhealthy):
                worker.exited()
        elif worker.phase in (Phase.NEW, Phase.FAILED):
            worker.exited()
        worker.notify()


def _closed_before_hello(exc: ChannelClosed, status: int | None) -> str:
    """Why a worker that closed its channel before its hello did not start.

    ``status`` is its exit status if it exited by itself within
    :data:`EXITING_WAIT_S` (a failed import, an exception in ``load``): its
    own traceback is then on the host's stderr. ``None``: the host stopped it.
    """
    if status is None:
        return (
            f"it closed its channel before its hello ({exc}) and had not exited "
            f"{EXITING_WAIT_S:g} s later, so the host stopped it"
        )
    how = _exit_how(status)
    return (
        f"it {how} before its hello ({exc}); the worker's own error is on the host's "
        "standard error (the terminal, or the server's log)"
    )


def _exit_how(status: int) -> str:
    """How a process with exit ``status`` ended, in words."""
    return f"was killed by signal {-status}" if status < 0 else f"exited with status {status}"
