"""The ``hash`` transport: subprocess workers on its own lane, and an
in-process variant of the same worker for fast tests."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from synapse_core.plugin import (
    InProcessWorkers,
    LaneInfo,
    Launched,
    LaunchRequest,
    ModelSpec,
    Transport,
    parse_options,
    spawn_worker,
)

from .worker import HashOptions, HashWorker

_pids = itertools.count(7_000_000)


class HashTransport(Transport):
    name = "hash"

    def options(self, model: ModelSpec) -> HashOptions:
        return parse_options(model.options, HashOptions, source=f"model {model.name!r}")

    def validate_model(self, model: ModelSpec) -> None:
        self.options(model)

    def buckets(self, model: ModelSpec) -> Sequence[int]:
        # Known before any worker starts: longer inputs are refused up front.
        return sorted(self.options(model).buckets)

    def lane_for(self, model: ModelSpec) -> LaneInfo:
        return LaneInfo("hash:0", capacity=100_000)

    async def launch(self, request: LaunchRequest) -> Launched:
        return await spawn_worker("synapse_hash_transport.worker:HashWorker", request)


class InProcessHashTransport(InProcessWorkers, HashTransport):
    """The same worker as a task of the host (tests)."""

    def __init__(self) -> None:
        InProcessWorkers.__init__(self)

    async def launch(self, request: LaunchRequest) -> Launched:
        return self.start_worker(request, HashWorker, next(_pids))
