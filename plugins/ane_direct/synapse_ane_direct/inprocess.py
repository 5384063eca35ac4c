"""The in-process simulated variant: the worker logic over memory streams.

For fast, deterministic tests of the direct-ANE path. It still goes through
the lane lock (``open_lane``): each in-process worker holds a duplicate of
the lock's descriptor until it ends, as a subprocess worker holds its
inherited one. Tests hold replies (:attr:`InProcessAneTransport.reply_gate`,
e.g. a :class:`ReplyGate`) and decide when a terminated worker's exit is
confirmed (:attr:`InProcessAneTransport.hold_exits`,
:meth:`InProcessProcess.confirm_exit`).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import attrs

from synapse_core.memory import byte_pipe
from synapse_core.transport import Launched, LaunchRequest
from synapse_core.wire import Frame
from synapse_core.worker_kit import serve_streams

from .device import SimulatedDevice
from .logic import AneLogic
from .options import parse_options
from .transport import AneDirectTransport, held_lane

_pids = itertools.count(5_000_000)


class InProcessProcess:
    """A worker task posing as a process. ``wait`` returns once the task has
    ended and, when exits are held, once the test calls :meth:`confirm_exit`."""

    def __init__(self, logic: AneLogic, hold_exit: bool) -> None:
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

    @property
    def pid(self) -> int | None:
        return self._pid

    @property
    def returncode(self) -> int | None:
        return self._returncode if self._gate.is_set() else None

    @property
    def exited(self) -> bool:
        return self._ended.is_set()

    def finish(self, status: int) -> None:
        self._returncode = status
        self._ended.set()

    def terminate(self) -> None:
        self.terminated = True
        self.scope.cancel()

    def kill(self) -> None:
        self.killed = True
        self.scope.cancel()

    def confirm_exit(self) -> None:
        """Let ``wait`` return (once the task has ended)."""
        self._gate.set()

    async def wait(self) -> int:
        await self._ended.wait()
        await self._gate.wait()
        assert self._returncode is not None
        return self._returncode


@attrs.define(eq=False)
class LaunchRecord:
    model: str
    generation: int
    process: InProcessProcess
    device: SimulatedDevice


class ReplyGate:
    """Holds the worker's replies to chosen frame types until :meth:`open`.

    Create it inside the event loop. ``held`` is set once a reply is held;
    ``frames`` lists the frames whose replies were held.
    """

    def __init__(self, *frame_types: type[Frame]) -> None:
        self.frame_types = frame_types
        self.held = anyio.Event()
        self.frames: list[Frame] = []
        self._open = anyio.Event()

    async def __call__(self, model: str, frame: Frame) -> None:
        if self._open.is_set() or not isinstance(frame, self.frame_types):
            return
        self.frames.append(frame)
        self.held.set()
        await self._open.wait()

    def open(self) -> None:
        self._open.set()


class InProcessAneTransport(AneDirectTransport):
    """``ane-direct`` with simulated in-process workers; the lane lock is real."""

    def __init__(self, runtime_dir: str | Path, *, name: str = "ane-direct") -> None:
        super().__init__("simulated", runtime_dir=runtime_dir)
        self.name = name
        self.hold_exits = False
        self.reply_gate: Callable[[str, Frame], Awaitable[None]] | None = None
        self.launches: list[LaunchRecord] = []
        self.trace: list[dict[str, object]] = []

    def launched(self, model: str) -> list[LaunchRecord]:
        return [r for r in self.launches if r.model == model]

    def frames(self, frame: str, model: str | None = None) -> list[dict[str, object]]:
        """Trace records of ``frame`` (``"admit"``, ``"infer"``...), oldest first."""
        return [
            r for r in self.trace if r["frame"] == frame and (model is None or r["model"] == model)
        ]

    async def launch(self, request: LaunchRequest) -> Launched:
        if request.task_group is None:
            raise RuntimeError("the in-process transport needs the host's task group")
        lock = held_lane(request)
        options = parse_options(request.model.options)
        # The compile delay is not slept here: tests hold replies instead.
        device = SimulatedDevice(options.dims, sleep=lambda _: None)
        logic = AneLogic(
            model=request.model.name,
            package=request.model.package,
            generation=request.generation,
            options=options,
            device=device,
            pid=next(_pids),
            trace_sink=self.trace.append,
            facts={"lane_lock_inherited": True},
        )
        process = InProcessProcess(logic, self.hold_exits)
        # What a subprocess inherits through pass_fds: the same open file
        # description, so the lane stays locked while this worker runs.
        inherited_fd = os.dup(lock.fd)
        host_send, worker_receive = byte_pipe()
        worker_send, host_receive = byte_pipe()
        model = request.model.name

        async def before_reply(frame: Frame) -> None:
            gate = self.reply_gate  # read per reply: tests may set it after launch
            if gate is not None:
                await gate(model, frame)

        async def run() -> None:
            status = -15
            try:
                with process.scope:
                    status = await serve_streams(
                        logic, worker_send, worker_receive, before_reply=before_reply
                    )
                if process.scope.cancelled_caught:
                    with anyio.CancelScope(shield=True):
                        await worker_send.aclose()
                        await worker_receive.aclose()
            finally:
                os.close(inherited_fd)
                process.finish(status)

        request.task_group.start_soon(run, name=f"in-process ane worker {request.worker_id}")
        self.launches.append(LaunchRecord(model, request.generation, process, device))
        return Launched(send=host_send, receive=host_receive, process=process)


__all__ = ["InProcessAneTransport", "InProcessProcess", "LaunchRecord", "ReplyGate"]
