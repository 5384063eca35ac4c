"""The fake transport: the core's own test transport, in two variants.

:class:`FakeTransport` starts real worker subprocesses
(:class:`~synapse_core.testing.fake_worker.FakeWorker`);
:class:`InProcessFakeTransport` runs the same worker as a task of the host,
where tests can hold replies and exits (see
:class:`~synapse_core.inprocess.InProcessWorkers`). Both register as ``fake``
unless given another name, on their own lane ``fake:0``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import anyio

from ..config import ModelSpec
from ..inprocess import InProcessWorkers
from ..transport import LaneInfo, Launched, LaunchRequest, Transport
from ..wire import Infer
from .fake_worker import FakeOptions, FakeWorker

LANE = LaneInfo("fake:0", capacity=1_000_000)
# Far above real pids, so an in-process worker is never mistaken for a process.
_pids = itertools.count(5_000_000)


class FakeTransport(Transport):
    """Real subprocess workers of the fake model; options, declared buckets and
    launching come from :class:`~synapse_core.transport.Transport`'s defaults."""

    worker = "synapse_core.testing.fake_worker:FakeWorker"
    options_type = FakeOptions

    def __init__(self, name: str = "fake", lane: LaneInfo = LANE) -> None:
        self.name = name
        self.lane = lane

    def lane_for(self, model: ModelSpec) -> LaneInfo:
        return self.lane


class InProcessFakeTransport(InProcessWorkers, FakeTransport):
    """The fake worker as a task of the host: fast, and held where tests say."""

    def __init__(self, name: str = "fake", lane: LaneInfo = LANE) -> None:
        InProcessWorkers.__init__(self)
        FakeTransport.__init__(self, name, lane)

    async def launch(self, request: LaunchRequest) -> Launched:
        return self.start_worker(request, FakeWorker, next(_pids))


class HeldReplies:
    """A :attr:`~synapse_core.inprocess.InProcessWorkers.reply_gate` that,
    once ``armed``, holds the worker's answer to every inference until the
    test releases it, and records the requests in the order the worker
    received them."""

    def __init__(self) -> None:
        self.armed = False
        self.received: list[Infer] = []
        self._releases: list[anyio.Event] = []
        self._arrival = anyio.Event()

    async def __call__(self, model: str, frame: Any) -> None:
        if not (self.armed and isinstance(frame, Infer)):
            return
        release = anyio.Event()
        self.received.append(frame)
        self._releases.append(release)
        self._arrival.set()
        self._arrival = anyio.Event()
        await release.wait()

    async def wait_for(self, count: int) -> None:
        """Until ``count`` requests have reached the worker."""
        while len(self.received) < count:
            await self._arrival.wait()

    async def answer(self, index: int) -> None:
        """Let the worker answer request ``index``, then let every task run
        until it blocks: each call is then either done or waiting."""
        self._releases[index].set()
        await anyio.wait_all_tasks_blocked()

    async def answer_all(self, after: Callable[[], None] = lambda: None) -> None:
        """Answer requests one at a time, in order, until nothing more comes;
        ``after`` is told after each answer."""
        index = 0
        while index < len(self.received):
            await self.answer(index)
            after()
            index += 1
