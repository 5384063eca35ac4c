"""The ``mock`` transport: real subprocess workers on lane ``mock:0``."""

from __future__ import annotations

from synapse_core.plugin import LaneInfo, ModelSpec, Transport

from .options import MockOptions

LANE = LaneInfo("mock:0", capacity=1_000_000)


class MockTransport(Transport):
    """Options, declared buckets and launching come from ``Transport``'s defaults."""

    name = "mock"
    worker = "synapse_mock_transport.worker:MockWorker"
    options_type = MockOptions

    def lane_for(self, model: ModelSpec) -> LaneInfo:
        return LANE
