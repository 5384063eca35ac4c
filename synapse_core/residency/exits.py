"""A lane supervisor's exits: stop a worker's process, confirm that it is
gone, and only then refund what it held.

A process whose exit cannot be confirmed in time is watched until it is gone
(:meth:`Exits._confirm_late`); its worker then carries on where it stopped,
through the ``resume`` it was given (the lifecycle's recovery).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from functools import partial

import anyio

from ..errors import ChannelClosed, ExitUnconfirmed, WireError
from ..observation import ShapeRefunded, WorkerExited
from ..process import confirm_exit, wait_gone
from ..transport import WorkerProcess
from ..wire import Shutdown
from . import logbook
from .context import Context
from .lane import Lane
from .worker import Phase, Worker

#: carry on a recovery of (worker, generation, reason) whose process was stopped
Resume = Callable[[Worker, int, str], Awaitable[None]]


class Exits:
    """Stops worker processes, confirms their exits and refunds after them."""

    def __init__(self, context: Context, lane: Lane, resume: Resume) -> None:
        self._context = context
        self._lane = lane
        self._resume = resume

    async def stop_process(self, worker: Worker, polite: bool) -> bool:
        """Close the channel and confirm the worker's exit; refund only if confirmed."""
        generation = worker.generation
        channel, process = worker.channel, worker.process
        if channel is not None:
            if polite:
                with (
                    anyio.move_on_after(self._context.config.exit_grace_s, shield=True),
                    contextlib.suppress(ChannelClosed, WireError),
                ):
                    await channel.send(Shutdown())
            await channel.aclose()
        confirmed = True
        if process is not None:
            if polite:
                with anyio.move_on_after(self._context.config.exit_grace_s, shield=True):
                    await process.wait()
            confirmed = await confirm_exit(process, self._context.config.exit_grace_s)
            cause = "retired" if worker.retiring else (worker.reason or "stopped")
            logbook.exited(worker, generation, cause, confirmed)
        self._context.emit(
            lambda: WorkerExited(self._lane.lane_id, worker.worker_id, generation, confirmed)
        )
        if not confirmed:
            assert process is not None
            worker.unconfirmed(
                f"worker pid {process.pid} did not exit after SIGTERM and SIGKILL; its "
                "reservations stay charged until it is gone"
            )
            self._linger(worker, process, charged=True)
            worker.notify()
            return False
        self.refund_all(worker)
        return True

    def refund_all(self, worker: Worker) -> None:
        """Refund ``worker``'s reservations: its process is confirmed gone."""
        for shape, charge in self._lane.worker_charges(worker.worker_id):
            units = self._lane.refund(worker.worker_id, shape)
            self._context.emit(
                partial(
                    ShapeRefunded,
                    self._lane.lane_id,
                    worker.worker_id,
                    charge.generation,
                    shape,
                    units,
                )
            )
        worker.gone()

    async def stop_now(self, worker: Worker) -> None:
        """Stop ``worker`` without waiting for its calls (a close that ran out of
        time); its reservations are refunded only once its exit is confirmed."""
        worker.retire()
        if worker.phase in (Phase.EXITED, Phase.EXIT_UNCONFIRMED):
            return
        if await self.stop_process(worker, polite=False):
            worker.exited()
        worker.notify()

    async def confirm_or_flag(self, worker: Worker, process: WorkerProcess) -> None:
        """Confirm a never-connected process's exit; if that fails, say so
        until it is gone (:meth:`_confirm_late` keeps watching it)."""
        if not await confirm_exit(process, self._context.config.exit_grace_s):
            self._linger(worker, process, charged=False)
            raise ExitUnconfirmed(
                f"a worker process (pid {process.pid}) that never connected did not exit "
                "after SIGTERM and SIGKILL; it may still hold the device until it is gone"
            )

    def _linger(self, worker: Worker, process: WorkerProcess, *, charged: bool) -> None:
        """Keep watching a process whose exit could not be confirmed."""
        worker.linger(process)
        self._context.tg.start_soon(
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
        await wait_gone(process, self._context.config.exit_grace_s)
        if not worker.stop_lingering(process):
            return
        if charged:
            logbook.exited(worker, generation, "its exit was confirmed late", True)
            self._context.emit(
                lambda: WorkerExited(self._lane.lane_id, worker.worker_id, generation, True)
            )
            self.refund_all(worker)
        if worker.phase is not Phase.EXIT_UNCONFIRMED:
            return
        if worker.retiring:
            worker.exited()
        elif charged:
            # Its recovery stopped at the unconfirmed exit: carry on from there.
            worker.resumes_recovery()
            worker.notify()
            await self._resume(worker, generation, "its exit was confirmed late")
            return
        else:
            worker.fail(f"worker failed to start; its process (pid {process.pid}) is now gone")
        worker.notify()
