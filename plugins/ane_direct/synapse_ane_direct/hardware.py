"""The Neural Engine device, through Apple's private framework and ctypes.

UNTESTED CODE. Synapse's direct-ANE transport was developed on Linux with the
simulated device; nothing in this module has ever run on a Mac. What it does:
refuse, with a typed error saying why, anywhere the hardware path cannot run
(not macOS, not Apple silicon, framework missing, worker without the lane
lock); otherwise load the framework and the Objective-C runtime with ctypes
and check that the classes Synapse would drive exist and that the machine
reports a Neural Engine. Compiling and evaluating programs is not written
yet: those calls refuse too. See the project's ``docs/ane-direct.md`` for
what a hardware run must verify.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
from collections.abc import Callable, Sequence

from synapse_core.plugin import Shape, Task

from .device import DeviceUnavailable

FRAMEWORK = "/System/Library/PrivateFrameworks/AppleNeuralEngine.framework"
FRAMEWORK_BINARY = f"{FRAMEWORK}/AppleNeuralEngine"
LIBOBJC = "/usr/lib/libobjc.A.dylib"
#: Classes the request path would use (names from the framework's headers).
CLASSES = ("_ANEClient", "_ANEModel", "_ANERequest", "_ANEIOSurfaceObject", "_ANEDeviceInfo")

NOT_WRITTEN = (
    "compiling and running programs on the Neural Engine is not implemented in this "
    "release of synapse-ane-direct (the framework loads, but the request path has never "
    "been written or run on hardware); use the mock transport or the simulated device"
)


def probe(
    system: str = sys.platform,
    machine: str | None = None,
    exists: Callable[[str], bool] = os.path.isdir,
) -> str:
    """Why the hardware path cannot run here, or ``""`` if it may.

    Cheap and side-effect free: it loads nothing (the worker does that).
    """
    if system != "darwin":
        return (
            f"the direct Neural Engine path needs macOS on Apple silicon with the private "
            f"AppleNeuralEngine framework; this system is {system!r}. Use a mock-transport "
            "model here (SYNAPSE_ANE_DEVICE=simulated runs a simulated device, for tests)"
        )
    machine = platform.machine() if machine is None else machine
    if machine != "arm64":
        return f"the direct Neural Engine path needs Apple silicon; this Mac is {machine!r}"
    if not exists(FRAMEWORK):
        return (
            f"the private framework {FRAMEWORK} is not on this macOS build; the direct "
            "Neural Engine path depends on it"
        )
    return ""


class HardwareDevice:
    """The Neural Engine of this Mac. Opening it refuses with
    :class:`~.device.DeviceUnavailable` wherever it cannot run."""

    kind = "hardware"

    def __init__(self, dims: int, *, lane_locked: bool) -> None:
        reason = probe()
        if reason:
            raise DeviceUnavailable(reason)
        if not lane_locked:
            raise DeviceUnavailable(
                "this worker does not hold the ane:0 lane lock; hardware workers are started "
                "by a Synapse host, which takes the lock and hands it to them"
            )
        self.dims = dims
        self._check_framework()
        self.identity = f"ane-{platform.mac_ver()[0] or 'unknown'}-d{dims}"

    def _check_framework(self) -> None:
        try:
            ctypes.CDLL(FRAMEWORK_BINARY)  # registers the framework's classes
            objc = ctypes.CDLL(LIBOBJC)
        except OSError as exc:
            raise DeviceUnavailable(f"cannot load {FRAMEWORK_BINARY}: {exc}") from None
        get_class = objc.objc_getClass
        get_class.restype, get_class.argtypes = ctypes.c_void_p, [ctypes.c_char_p]
        get_selector = objc.sel_registerName
        get_selector.restype, get_selector.argtypes = ctypes.c_void_p, [ctypes.c_char_p]
        classes = {name: get_class(name.encode()) for name in CLASSES}
        missing = [name for name, cls in classes.items() if not cls]
        if missing:
            raise DeviceUnavailable(
                f"{FRAMEWORK_BINARY} lacks {', '.join(missing)}: this macOS build's framework "
                "differs from the one Synapse was written against"
            )
        # objc_msgSend must be called through a prototype of the exact method
        # signature (arm64 passes variadic arguments differently).
        send_bool = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_void_p, ctypes.c_void_p)(
            ("objc_msgSend", objc)
        )
        send_id = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
            ("objc_msgSend", objc)
        )
        if not send_bool(classes["_ANEDeviceInfo"], get_selector(b"hasANE")):
            raise DeviceUnavailable("this Mac reports no Neural Engine (_ANEDeviceInfo hasANE)")
        if not send_id(classes["_ANEClient"], get_selector(b"sharedConnection")):
            raise DeviceUnavailable("could not connect to the Neural Engine service (aned)")

    def compile(self, shape: Shape) -> bool:
        raise DeviceUnavailable(NOT_WRITTEN)

    def run(
        self,
        shape: Shape,
        task: Task,
        sequences: Sequence[Sequence[int]],
        query: Sequence[int] | None,
    ) -> list[list[float]]:
        raise DeviceUnavailable(NOT_WRITTEN)

    def evict(self, shape: Shape) -> None:
        pass  # nothing was compiled

    def close(self) -> None:
        pass
