"""The ``mock`` transport: real subprocess workers on lane ``mock:0``."""

from __future__ import annotations

from collections.abc import Sequence

from synapse_core.plugin import (
    LaneInfo,
    Launched,
    LaunchRequest,
    ModelSpec,
    Transport,
    spawn_worker,
)

from .options import parse_options

LANE = LaneInfo("mock:0", capacity=1_000_000)
WORKER = "synapse_mock_transport.worker:MockWorker"


class MockTransport(Transport):
    name = "mock"

    def validate_model(self, model: ModelSpec) -> None:
        parse_options(model.options, source=f"model {model.name!r}")

    def buckets(self, model: ModelSpec) -> Sequence[int]:
        return sorted(parse_options(model.options, source=f"model {model.name!r}").buckets)

    def lane_for(self, model: ModelSpec) -> LaneInfo:
        return LANE

    async def launch(self, request: LaunchRequest) -> Launched:
        return await spawn_worker(WORKER, request)
