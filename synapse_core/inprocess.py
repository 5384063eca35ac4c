"""In-process workers: a transport's worker logic run as a task over memory
streams, posing as a process. For fast, deterministic tests of a transport,
its plugin users' code, and the host around it.

Tests hold replies (:attr:`InProcessWorkers.reply_gate`) and decide when a
terminated worker's exit is confirmed (:attr:`InProcessWorkers.hold_exits`,
:meth:`InProcessProcess.confirm_exit`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import attrs

from .memory import byte_pipe
from .process import launch_spec
from .transport import Launched, LaunchRequest
from .wire import Frame
from .worker import ModelWorker, WorkerLogic, build_logic, serve_streams

ReplyGate = Callable[[str, Frame], Awaitable[None]]


class InProcessProcess:
    """A worker task posing as a process. ``wait`` returns once the task has
    ended and, when exits are held, once the test calls :meth:`confirm_exit`."""

    def __init__(self, pid: int, ignore_sigterm: bool, hold_exit: bool) -> None:
        self._pid = pid
        self.ignore_sigterm = ignore_sigterm
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
        """The task has ended (whether or not its exit is confirmed yet)."""
        return self._ended.is_set()

    def finish(self, status: int) -> None:
        self._returncode = status
        self._ended.set()

    def terminate(self) -> None:
        self.terminated = True
        if not self.ignore_sigterm:
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
    logic: Any


class InProcessWorkers:
    """Mix into a transport to run its workers in-process.

    The transport's ``launch`` calls :meth:`start_worker` with its
    :class:`~synapse_core.worker.ModelWorker` class (or builds a
    :class:`~synapse_core.worker.WorkerLogic` and calls
    :meth:`start_in_process`); the records and trace let tests see what ran.
    """

    def __init__(self) -> None:
        self.hold_exits = False
        self.reply_gate: ReplyGate | None = None
        self.launches: list[LaunchRecord] = []
        self.trace: list[dict[str, Any]] = []

    def launched(self, model: str) -> list[LaunchRecord]:
        return [r for r in self.launches if r.model == model]

    def frames(self, frame: str, model: str | None = None) -> list[dict[str, Any]]:
        """Trace records of ``frame`` (``"admit"``, ``"infer"``...), oldest first."""
        return [
            r for r in self.trace if r["frame"] == frame and (model is None or r["model"] == model)
        ]

    def start_worker(
        self,
        request: LaunchRequest,
        worker_class: type[ModelWorker],
        pid: int,
        *,
        on_exit: Callable[[], None] | None = None,
    ) -> Launched:
        """Build ``worker_class`` for ``request`` as a subprocess would (options,
        fault knobs, tracing into :attr:`trace`) and start it in-process."""
        spec = launch_spec(request)
        logic = build_logic(worker_class, spec, pid=pid, trace_sink=self.trace.append)
        return self.start_in_process(request, logic, pid, on_exit=on_exit)

    def start_in_process(
        self,
        request: LaunchRequest,
        logic: WorkerLogic,
        pid: int,
        *,
        on_exit: Callable[[], None] | None = None,
    ) -> Launched:
        """Start ``logic`` as a task of the host; return what ``launch`` returns."""
        if request.task_group is None:
            raise RuntimeError("in-process workers need the host's task group")
        process = InProcessProcess(pid, logic.ignore_sigterm, self.hold_exits)
        host_send, worker_receive = byte_pipe()
        worker_send, host_receive = byte_pipe()
        model = request.model.name

        async def before_reply(frame: Frame) -> None:
            gate = self.reply_gate  # read per reply: tests may set it after launch
            if gate is not None:
                await gate(model, frame)

        async def run() -> None:
            status = -15  # as if SIGTERM, when the task is cancelled
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
                if on_exit is not None:
                    on_exit()
                process.finish(status)

        request.task_group.start_soon(run, name=f"in-process worker {request.worker_id}")
        self.launches.append(LaunchRecord(model, request.generation, process, logic))
        return Launched(send=host_send, receive=host_receive, process=process)
