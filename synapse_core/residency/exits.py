"""A lane supervisor's exits: stop a worker's process, confirm that it is
gone, and only then refund what it held.

A process whose exit cannot be confirmed in time is watched until it is gone
(:meth:`Exits._confirm_late`); its worker then carries on where it stopped.

# Invariant: a worker's reservations are refunded only once the exit of the
#   process that held them is confirmed (``_refund_all``); a process whose exit
#   could not be confirmed is ``lingering`` and keeps them charged.
# Invariant: a worker in phase EXITED holds no reservation on its lane.
"""

from __future__ import annotations

import contextlib
from functools import partial

import anyio

from ..errors import ChannelClosed, ExitUnconfirmed, WireError
from ..observation import ShapeRefunded, WorkerExited
from ..process import confirm_exit, wait_gone
from ..transport import WorkerProcess
from ..wire import Shutdown
from . import logbook
from .state import SupervisorState
from .worker import Phase, Worker


class Exits(SupervisorState):
    """Stops worker processes, confirms their exits and refunds after them."""

    async def _recover(
        self, worker: Worker, generation: int, reason: str, *, stopped: bool = False
    ) -> None:
        """Stop the faulted ``generation`` (unless already ``stopped``), then
        relaunch: :class:`~.lifecycle.Lifecycle` does it."""
        raise NotImplementedError

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
            cause = "retired" if worker.retiring else (worker.reason or "stopped")
            logbook.exited(worker, generation, cause, confirmed)
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
            logbook.exited(worker, generation, "its exit was confirmed late", True)
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
