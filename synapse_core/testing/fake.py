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
from collections.abc import Sequence

from ..config import ModelSpec
from ..inprocess import InProcessWorkers
from ..process import spawn_worker
from ..transport import LaneInfo, Launched, LaunchRequest, Transport
from .fake_worker import FakeOptions, FakeWorker, fake_options

LANE = LaneInfo("fake:0", capacity=1_000_000)
WORKER = "synapse_core.testing.fake_worker:FakeWorker"
# Far above real pids, so an in-process worker is never mistaken for a process.
_pids = itertools.count(5_000_000)


class FakeTransport(Transport):
    """Real subprocess workers of the fake model."""

    def __init__(self, name: str = "fake", lane: LaneInfo = LANE) -> None:
        self.name = name
        self.lane = lane

    def options(self, model: ModelSpec) -> FakeOptions:
        return fake_options(model.options, source=f"model {model.name!r}")

    def validate_model(self, model: ModelSpec) -> None:
        self.options(model)

    def buckets(self, model: ModelSpec) -> Sequence[int]:
        return sorted(self.options(model).buckets)

    def lane_for(self, model: ModelSpec) -> LaneInfo:
        return self.lane

    async def launch(self, request: LaunchRequest) -> Launched:
        return await spawn_worker(WORKER, request)


class InProcessFakeTransport(InProcessWorkers, FakeTransport):
    """The fake worker as a task of the host: fast, and held where tests say."""

    def __init__(self, name: str = "fake", lane: LaneInfo = LANE) -> None:
        InProcessWorkers.__init__(self)
        FakeTransport.__init__(self, name, lane)

    async def launch(self, request: LaunchRequest) -> Launched:
        return self.start_worker(request, FakeWorker, next(_pids))
