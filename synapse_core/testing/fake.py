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

from ..config import ModelSpec
from ..inprocess import InProcessWorkers
from ..transport import LaneInfo, Launched, LaunchRequest, Transport
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
