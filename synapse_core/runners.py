"""The host's call runners: detached tasks that serve one call after another."""

from __future__ import annotations

import anyio
from anyio.abc import TaskGroup

from .call import Call
from .residency.supervisor import Supervisor
from .residency.worker import Worker
from .serving import CallRunner


class Slot:
    __slots__ = ("event", "job")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.job: tuple[Call, Supervisor, Worker] | None = None


class Runners:
    """Detached call tasks, reused: waking an idle one costs less than
    starting a task per call. Each still runs in the host's task group.

    At most ``keep`` of them stay parked; one that finishes a call when that
    many are idle ends, so a burst does not leave its runners behind. A
    parked runner holds nothing of the call it ran.
    """

    def __init__(self, tg: TaskGroup, runner: CallRunner, keep: int) -> None:
        self.tg = tg
        self.runner = runner
        self.keep = keep
        self.idle: list[Slot] = []

    def submit(self, job: tuple[Call, Supervisor, Worker]) -> None:
        if self.idle:
            slot = self.idle.pop()
            slot.job = job
            slot.event.set()
        else:
            self.tg.start_soon(self._loop, job, name="call runner")

    async def _loop(self, job: tuple[Call, Supervisor, Worker]) -> None:
        slot = Slot()
        try:
            while True:
                await self.runner.run(*job)
                del job  # the call's texts, plan and rows are its caller's alone now
                if len(self.idle) >= self.keep:
                    return
                # Park at once: the caller wakes only once this task yields.
                self.idle.append(slot)
                await slot.event.wait()
                slot.event = anyio.Event()
                assert slot.job is not None
                job, slot.job = slot.job, None
        except BaseException:
            # Cancelled (the host is closing): take no more work, and end a call
            # handed over as the cancellation landed, letting go of what its
            # caller took for it.
            if slot in self.idle:
                self.idle.remove(slot)
            if slot.job is not None:
                self.runner.cancel(*slot.job)
                slot.job = None
            raise
