"""The in-process variant: the same worker logic over memory streams.

For fast, deterministic tests. Tests hold replies (:attr:`InProcessTransport.reply_gate`)
and decide when a terminated worker's exit is confirmed
(:attr:`InProcessTransport.hold_exits`, :meth:`InProcessProcess.confirm_exit`).
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import attrs

from synapse_core.config import ModelSpec
from synapse_core.memory import byte_pipe
from synapse_core.transport import LaneInfo, Launched, LaunchRequest, Transport
from synapse_core.wire import Frame
from synapse_core.worker_kit import serve_streams

from .logic import MockLogic
from .options import parse_options
from .transport import LANE

_pids = itertools.count(4_000_000)


class InProcessProcess:
    """A worker task posing as a process. ``wait`` returns once the task has
    ended and, when exits are held, once the test calls :meth:`confirm_exit`."""

    def __init__(self, logic: MockLogic, hold_exit: bool) -> None:
        self.logic = logic
        self._pid = logic.pid
        self._returncode: int | None = None
        self._ended = anyio.Event()
        self._gate = anyio.Event()
        if not hold_exit:
            self._gate.set()
        self.scope = anyio.CancelScope()
        self.terminated = False
        self.killed = False
        self.exit_waiters = 0

    @property
    def pid(self) -> int | None:
        return self._pid

    @property
    def returncode(self) -> int | None:
        return self._returncode if self._gate.is_set() else None

    def _finish(self, status: int) -> None:
        self._returncode = status
        self._ended.set()

    def terminate(self) -> None:
        self.terminated = True
        if not self.logic.ignore_sigterm:
            self.scope.cancel()

    def kill(self) -> None:
        self.killed = True
        self.scope.cancel()

    def confirm_exit(self) -> None:
        """Let ``wait`` return (once the task has ended)."""
        self._gate.set()

    @property
    def exited(self) -> bool:
        return self._ended.is_set()

    async def wait(self) -> int:
        self.exit_waiters += 1
        await self._ended.wait()
        await self._gate.wait()
        assert self._returncode is not None
        return self._returncode


@attrs.define(eq=False)
class LaunchRecord:
    model: str
    generation: int
    process: InProcessProcess


class InProcessTransport(Transport):
    """Registers under ``name`` (default ``mock``) in place of the subprocess one."""

    def __init__(self, name: str = "mock", lane: LaneInfo = LANE) -> None:
        self.name = name
        self.lane = lane
        self.hold_exits = False
        self.reply_gate: Callable[[str, Frame], Awaitable[None]] | None = None
        self.launches: list[LaunchRecord] = []
        self.trace: list[dict[str, Any]] = []
        self.on_launch: Callable[[LaunchRecord], None] | None = None

    def validate_model(self, model: ModelSpec) -> None:
        parse_options(model.options, source=f"model {model.name!r}")

    def lane_for(self, model: ModelSpec) -> LaneInfo:
        return self.lane

    def launched(self, model: str) -> list[LaunchRecord]:
        return [r for r in self.launches if r.model == model]

    def frames(self, frame: str, model: str | None = None) -> list[dict[str, Any]]:
        return [
            r for r in self.trace if r["frame"] == frame and (model is None or r["model"] == model)
        ]

    async def launch(self, request: LaunchRequest) -> Launched:
        if request.task_group is None:
            raise RuntimeError("the in-process transport needs the host's task group")
        logic = MockLogic(
            model=request.model.name,
            package=request.model.package,
            generation=request.generation,
            options=parse_options(request.model.options),
            pid=next(_pids),
            trace_sink=self.trace.append,
        )
        process = InProcessProcess(logic, self.hold_exits)
        host_send, worker_receive = byte_pipe()
        worker_send, host_receive = byte_pipe()
        gate = self.reply_gate
        model = request.model.name

        async def before_reply(frame: Frame) -> None:
            if gate is not None:
                await gate(model, frame)

        async def run() -> None:
            status = -15
            with process.scope:
                status = await serve_streams(
                    logic, worker_send, worker_receive, before_reply=before_reply
                )
            if process.scope.cancelled_caught:
                with anyio.CancelScope(shield=True):
                    await worker_send.aclose()
                    await worker_receive.aclose()
            process._finish(status)

        request.task_group.start_soon(run, name=f"in-process worker {request.worker_id}")
        record = LaunchRecord(model, request.generation, process)
        self.launches.append(record)
        if self.on_launch is not None:
            self.on_launch(record)
        return Launched(send=host_send, receive=host_receive, process=process)


__all__ = ["InProcessProcess", "InProcessTransport", "LaunchRecord"]
