"""The in-process variant: the same worker logic over memory streams.

For fast, deterministic tests; see :mod:`synapse_core.inprocess` for holding
replies and exits.
"""

from __future__ import annotations

import itertools

from synapse_core.config import ModelSpec
from synapse_core.inprocess import InProcessProcess, InProcessWorkers, LaunchRecord
from synapse_core.transport import LaneInfo, Launched, LaunchRequest, Transport

from .logic import MockLogic
from .options import parse_options
from .transport import LANE

_pids = itertools.count(4_000_000)


class InProcessTransport(InProcessWorkers, Transport):
    """Registers under ``name`` (default ``mock``) in place of the subprocess one."""

    def __init__(self, name: str = "mock", lane: LaneInfo = LANE) -> None:
        super().__init__()
        self.name = name
        self.lane = lane

    def validate_model(self, model: ModelSpec) -> None:
        parse_options(model.options, source=f"model {model.name!r}")

    def lane_for(self, model: ModelSpec) -> LaneInfo:
        return self.lane

    async def launch(self, request: LaunchRequest) -> Launched:
        pid = next(_pids)
        logic = MockLogic(
            model=request.model.name,
            package=request.model.package,
            generation=request.generation,
            options=parse_options(request.model.options),
            pid=pid,
            trace_sink=self.trace.append,
        )
        return self.start_in_process(request, logic, pid)


__all__ = ["InProcessProcess", "InProcessTransport", "LaunchRecord"]
