"""The ``mock`` transport: real subprocess workers on lane ``mock:0``."""

from __future__ import annotations

from synapse_core.config import ModelSpec
from synapse_core.process import spawn_worker
from synapse_core.transport import LaneInfo, Launched, LaunchRequest, Transport

from .options import parse_options

LANE = LaneInfo("mock:0", capacity=1_000_000)


class MockTransport(Transport):
    name = "mock"

    def validate_model(self, model: ModelSpec) -> None:
        parse_options(model.options, source=f"model {model.name!r}")

    def lane_for(self, model: ModelSpec) -> LaneInfo:
        return LANE

    async def launch(self, request: LaunchRequest) -> Launched:
        return await spawn_worker("synapse_mock_transport.worker", request)
