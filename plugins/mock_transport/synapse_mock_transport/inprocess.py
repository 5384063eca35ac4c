"""The in-process variant: the same worker class over memory streams.

For fast, deterministic tests; see :mod:`synapse_core.inprocess` for holding
replies and exits.
"""

from __future__ import annotations

import itertools

from synapse_core.plugin import (
    InProcessProcess,
    InProcessWorkers,
    LaneInfo,
    Launched,
    LaunchRecord,
    LaunchRequest,
)

from .transport import LANE, MockTransport
from .worker import MockWorker

_pids = itertools.count(4_000_000)


class InProcessTransport(InProcessWorkers, MockTransport):
    """Registers under ``name`` (default ``mock``) in place of the subprocess one."""

    def __init__(self, name: str = "mock", lane: LaneInfo = LANE) -> None:
        super().__init__()
        self.name = name
        self.lane = lane

    def lane_for(self, model: object) -> LaneInfo:
        return self.lane

    async def launch(self, request: LaunchRequest) -> Launched:
        return self.start_worker(request, MockWorker, next(_pids))


__all__ = ["InProcessProcess", "InProcessTransport", "LaunchRecord"]
