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
from pathlib import Path

import anyio

from synapse_core.plugin import (
    Frame,
    InProcessProcess,
    InProcessWorkers,
    Launched,
    LaunchRecord,
    LaunchRequest,
)

from .device import Device, SimulatedDevice
from .options import AneOptions
from .transport import AneDirectTransport, held_lane
from .worker import AneWorker

_pids = itertools.count(5_000_000)


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


class InProcessAneTransport(InProcessWorkers, AneDirectTransport):
    """``ane-direct`` with simulated in-process workers; the lane lock is real."""

    def __init__(self, runtime_dir: str | Path, *, name: str = "ane-direct") -> None:
        InProcessWorkers.__init__(self)
        AneDirectTransport.__init__(self, "simulated", runtime_dir=runtime_dir)
        self.name = name

    async def launch(self, request: LaunchRequest) -> Launched:
        lock = held_lane(request)
        # What a subprocess inherits through pass_fds: the same open file
        # description, so the lane stays locked while this worker runs.
        inherited_fd = os.dup(lock.fd)
        return self.start_worker(
            request, InProcessAneWorker, next(_pids), on_exit=lambda: os.close(inherited_fd)
        )


class InProcessAneWorker(AneWorker):
    """An :class:`AneWorker` on a simulated device whose compiles take no time:
    tests hold replies instead."""

    def open_device(self, options: AneOptions) -> tuple[Device, dict[str, object]]:
        return SimulatedDevice(options.dims, sleep=lambda _: None), {"lane_lock_inherited": True}


__all__ = [
    "InProcessAneTransport",
    "InProcessAneWorker",
    "InProcessProcess",
    "LaunchRecord",
    "ReplyGate",
]
