"""Fixtures for the mock transport's tests: backends, and workers to talk to directly.

``spawn`` starts the real subprocess worker (``python -m
synapse_mock_transport.worker``) through :func:`synapse_core.process.spawn_worker`;
``in_process`` starts the in-process variant. Both hand back a
:class:`RunningWorker` and always reap the worker when the block ends.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

from synapse_core import Hello, ModelSpec
from synapse_core.channel import Exchange, FramedChannel
from synapse_core.plugin import (
    Frame,
    Launched,
    LaunchRequest,
    Shape,
    Task,
    WorkerProcess,
    confirm_exit,
    spawn_worker,
)
from synapse_core.wire import Admit, Codec, Infer, InventoryRequest, WorkerFrame
from synapse_mock_transport.inprocess import InProcessTransport
from synapse_mock_transport.transport import LANE, MockTransport

WORKER = MockTransport.worker
#: Bounds that keep a broken worker from hanging the suite; never timing claims.
BOUND_S = 15.0
EXIT_GRACE_S = 5.0
DEFAULT_SHAPE = Shape(16, 2)


def model_spec(options: dict[str, Any] | None = None, name: str = "m") -> ModelSpec:
    return ModelSpec(name, "embed", "mock", "mock-pkg", 512, dict(options or {}))


@attrs.define(eq=False)
class RunningWorker:
    """A started worker and the host's end of its channel."""

    launched: Launched
    channel: FramedChannel
    hello: Hello
    #: the in-process variant's transport (its trace and launches); None for subprocesses
    transport: InProcessTransport | None = None
    _ids: itertools.count[int] = attrs.field(factory=lambda: itertools.count(1))

    @property
    def process(self) -> WorkerProcess:
        return self.launched.process

    async def exchange(
        self, frame: Frame, timeout: float = BOUND_S, progress: Exchange | None = None
    ) -> Frame:
        return await self.channel.exchange(frame, timeout, progress)

    async def admit(self, bucket: int = 16, batch: int = 2) -> Frame:
        return await self.exchange(Admit(next(self._ids), Shape(bucket, batch)))

    async def infer(
        self,
        sequences: list[list[int]] | None = None,
        shape: Shape = DEFAULT_SHAPE,
        task: Task = "embed",
        query: list[int] | None = None,
        timeout: float = BOUND_S,
        progress: Exchange | None = None,
    ) -> Frame:
        frame = Infer(next(self._ids), shape, task, sequences or [[5, 6, 7]], query)
        return await self.exchange(frame, timeout, progress)

    async def inventory(self) -> Frame:
        return await self.exchange(InventoryRequest(next(self._ids)))


Start = Callable[..., AbstractAsyncContextManager[RunningWorker]]


async def _connect(
    launched: Launched, transport: InProcessTransport | None = None
) -> RunningWorker:
    channel = FramedChannel(launched.send, launched.receive, Codec(WorkerFrame))
    with anyio.fail_after(BOUND_S):
        hello = await channel.receive()
    assert isinstance(hello, Hello)
    return RunningWorker(launched, channel, hello, transport)


async def _close_and_reap(launched: Launched) -> bool:
    """Close the host's ends, then confirm the worker's exit (SIGTERM, then SIGKILL)."""
    with anyio.CancelScope(shield=True):
        for stream in (launched.send, launched.receive):
            with suppress(anyio.BrokenResourceError, OSError):
                await stream.aclose()
        exited = await confirm_exit(launched.process, EXIT_GRACE_S)
    return exited


@pytest.fixture
def spawn() -> Start:
    """``async with spawn(options, generation=1) as worker``: a real worker process."""

    @asynccontextmanager
    async def start(
        options: dict[str, Any] | None = None, generation: int = 1, name: str = "m"
    ) -> AsyncIterator[RunningWorker]:
        request = LaunchRequest(model_spec(options, name), f"{name}#1", generation, LANE)
        launched = await spawn_worker(WORKER, request)
        try:
            yield await _connect(launched)
        finally:
            exited = await _close_and_reap(launched)
        # Reached only when the body succeeded: a worker left running is a failure.
        assert exited, f"worker {launched.process.pid} could not be reaped"

    return start


@pytest.fixture
def in_process() -> Start:
    """``async with in_process(options, generation=1) as worker``: the in-process variant.

    The worker's :class:`InProcessTransport` is reachable as ``worker.transport``.
    """

    @asynccontextmanager
    async def start(
        options: dict[str, Any] | None = None, generation: int = 1, name: str = "m"
    ) -> AsyncIterator[RunningWorker]:
        transport = InProcessTransport()
        async with anyio.create_task_group() as tg:
            request = LaunchRequest(
                model_spec(options, name), f"{name}#1", generation, LANE, None, tg
            )
            launched = await transport.launch(request)
            try:
                yield await _connect(launched, transport)
            finally:
                exited = await _close_and_reap(launched)
        assert exited

    return start


@attrs.define
class TraceFile:
    """Where a worker's ``trace`` option writes, and what it wrote."""

    path: Path

    def records(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        lines = self.path.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines]

    def frames(self) -> list[str]:
        return [str(r["frame"]) for r in self.records()]


@pytest.fixture
def trace(tmp_path: Path) -> TraceFile:
    return TraceFile(tmp_path / "trace.jsonl")


@pytest.fixture(params=[pytest.param("subprocess", marks=pytest.mark.subprocess), "in-process"])
def start(request: pytest.FixtureRequest, spawn: Start, in_process: Start) -> Start:
    """Either variant of the worker: tests using it must pass against both."""
    return spawn if request.param == "subprocess" else in_process
