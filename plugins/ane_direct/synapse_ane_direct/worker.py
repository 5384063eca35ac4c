"""The direct-ANE worker: a ``ModelWorker`` over a :class:`~.device.Device`.

Started by :class:`~.transport.AneDirectTransport` as
``synapse_ane_direct.worker:AneWorker``, with the lane lock's descriptor
inherited and ``TMPDIR`` removed from the environment. The in-process
variant runs a subclass that opens a simulated device.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from synapse_core.plugin import ModelWorker, Shape, worker_main

from . import __version__
from .device import Device, DeviceUnavailable, RefusingDevice, SimulatedDevice
from .hardware import HardwareDevice
from .lanelock import holds_lane
from .options import AneOptions
from .transport import ENV_DEVICE, ENV_LANE_FD, ENV_LANE_LOCK

IMPLEMENTATION = "synapse-ane-direct"


def device_kind(options: AneOptions, env: Mapping[str, str]) -> str:
    """Simulation can be asked for by the model or by the host; never turned off."""
    if options.device == "simulated" or env.get(ENV_DEVICE) == "simulated":
        return "simulated"
    return "hardware"


def inherited_lane_lock(env: Mapping[str, str]) -> bool:
    """Whether this process holds the lane lock its host handed down."""
    fd, path = env.get(ENV_LANE_FD), env.get(ENV_LANE_LOCK)
    if not fd or not path or not fd.isdigit():
        return False
    return holds_lane(int(fd), path)


def open_device(kind: str, options: AneOptions, lane_locked: bool) -> Device:
    """The worker's device; one that cannot open answers every request with why."""
    if kind == "simulated":
        return SimulatedDevice(options.dims, compile_delay_s=options.compile_delay_s)
    try:
        return HardwareDevice(options.dims, lane_locked=lane_locked)
    except DeviceUnavailable as exc:
        print(f"ane-direct worker: Neural Engine unavailable: {exc}", file=sys.stderr)
        return RefusingDevice(str(exc))


class AneWorker(ModelWorker):
    """One direct-ANE worker generation.

    The hello's trace record carries ``facts`` about the environment the
    worker really ran in (the device, whether ``TMPDIR`` was set and whether
    the lane lock was inherited), so tests can check them.
    """

    options_type = AneOptions
    version = __version__
    device: Device
    facts: dict[str, object]

    def load(self, options: AneOptions) -> None:
        self.device, self.facts = self.open_device(options)
        self.buckets = options.buckets
        self.dims = options.dims
        self.max_batch = options.max_batch
        self.implementation = f"{IMPLEMENTATION} ({self.device.kind} device)"
        self.identity = f"ane-direct:{self.package}:{self.device.identity}:v1"

    def open_device(self, options: AneOptions) -> tuple[Device, dict[str, object]]:
        """The device this worker drives, and the facts to trace about it."""
        env = os.environ
        lane_locked = inherited_lane_lock(env)
        device = open_device(device_kind(options, env), options, lane_locked)
        return device, {"tmpdir_set": "TMPDIR" in env, "lane_lock_inherited": lane_locked}

    def admit(self, shape: Shape) -> None:
        self.device.compile(shape)

    def embed(self, batch: list[list[int]]) -> list[list[float]]:
        return self.device.run(self.shape, "embed", batch, None)

    def rerank(self, query: list[int], batch: list[list[int]]) -> list[list[float]]:
        return self.device.run(self.shape, "rerank", batch, query)

    def evict(self, shape: Shape) -> None:
        self.device.evict(shape)

    def close(self) -> None:
        self.device.close()

    def trace_facts(self) -> Mapping[str, object]:
        return {"device": self.device.kind, **self.facts}


if __name__ == "__main__":
    sys.exit(worker_main(AneWorker))
