"""The direct-ANE worker process: ``python -m synapse_ane_direct.worker --spec JSON``.

Started by :class:`~.transport.AneDirectTransport` with the lane lock's
descriptor inherited and ``TMPDIR`` removed from the environment.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from synapse_core.wire import LaunchSpec
from synapse_core.worker_kit import worker_main

from .device import Device, DeviceUnavailable, RefusingDevice, SimulatedDevice
from .hardware import HardwareDevice
from .lanelock import holds_lane
from .logic import AneLogic
from .options import AneOptions, parse_options
from .transport import ENV_DEVICE, ENV_LANE_FD, ENV_LANE_LOCK


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


def build(spec: LaunchSpec) -> AneLogic:
    options = parse_options(spec.options)
    env = os.environ
    lane_locked = inherited_lane_lock(env)
    return AneLogic(
        model=spec.model,
        package=spec.package,
        generation=spec.generation,
        options=options,
        device=open_device(device_kind(options, env), options, lane_locked),
        facts={"tmpdir_set": "TMPDIR" in env, "lane_lock_inherited": lane_locked},
    )


def main(argv: list[str] | None = None) -> int:
    return worker_main("synapse_ane_direct.worker", build, argv)


if __name__ == "__main__":
    sys.exit(main())
