"""The fake transport: the core's own test transport, in two variants.

:class:`FakeTransport` starts real worker subprocesses
(:mod:`synapse_core.testing.fake_worker`); :class:`InProcessFakeTransport` runs
the same worker logic as a task of the host, where tests can hold replies and
exits (see :class:`~synapse_core.inprocess.InProcessWorkers`). Both register
as ``fake`` unless given another name, on their own lane ``fake:0``.
"""

from __future__ import annotations

import itertools

from ..config import ModelSpec
from ..inprocess import InProcessWorkers
from ..process import launch_spec, spawn_worker
from ..transport import LaneInfo, Launched, LaunchRequest, Transport
from .fake_worker import FakeLogic, parse_options

LANE = LaneInfo("fake:0", capacity=1_000_000)
WORKER_MODULE = "synapse_core.testing.fake_worker"
# Far above real pids, so an in-process worker is never mistaken for a process.
_pids = itertools.count(5_000_000)


class FakeTransport(Transport):
    """Real subprocess workers of the fake model."""

    def __init__(self, name: str = "fake", lane: LaneInfo = LANE) -> None:
        self.name = name
        self.lane = lane

    def validate_model(self, model: ModelSpec) -> None:
        parse_options(model.options, source=f"model {model.name!r}")

    def lane_for(self, model: ModelSpec) -> LaneInfo:
        return self.lane

    async def launch(self, request: LaunchRequest) -> Launched:
        return await spawn_worker(WORKER_MODULE, request)


class InProcessFakeTransport(InProcessWorkers, FakeTransport):
    """The fake worker as a task of the host: fast, and held where tests say."""

    def __init__(self, name: str = "fake", lane: LaneInfo = LANE) -> None:
        InProcessWorkers.__init__(self)
        FakeTransport.__init__(self, name, lane)

    async def launch(self, request: LaunchRequest) -> Launched:
        pid = next(_pids)
        logic = FakeLogic(launch_spec(request), pid=pid, sink=self.trace.append)
        return self.start_in_process(request, logic, pid)
