"""The GPU a lane runs on, behind a small interface: its memory and the
execution providers a worker gives onnxruntime for it.

:class:`NvmlDevice` is a real NVIDIA GPU, read through NVML (the driver's
``libnvidia-ml.so.1``, loaded with ctypes: no package, no CUDA context, so the
host can ask it too). :class:`SimulatedDevice` is a GPU of a given memory
size that runs on onnxruntime's CPU execution provider: tests and CI run the
lane's very worker, graphs and accounting on it.

A lane ``cuda:N`` is the N-th GPU ``CUDA_VISIBLE_DEVICES`` lets processes see
(all of them, in PCI bus order, when it is unset). Workers run with
``CUDA_DEVICE_ORDER=PCI_BUS_ID``, so onnxruntime's ``device_id`` N is the GPU
NVML finds for the same entry.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from synapse_models.sessions import Provider

MIB = 1 << 20
#: what the simulated device has unless told otherwise (an H100's 80 GiB)
SIMULATED_MIB = 81_559
CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"
#: the CUDA execution provider's options besides ``device_id``: its arena
#: grows by what is asked (not by powers of two), so the memory a shape adds
#: is what that shape needs; copies use the compute stream; float32 products
#: stay float32 (TF32 would cut them to a 10-bit mantissa: float32 is the
#: exact option, float16 the fast one)
CUDA_OPTIONS: Mapping[str, Any] = {
    "use_tf32": 0,
    "arena_extend_strategy": "kSameAsRequested",
    "cudnn_conv_algo_search": "HEURISTIC",
    "do_copy_in_default_stream": True,
}


class Device(Protocol):
    """One GPU as the lane sees it."""

    @property
    def index(self) -> int:
        """N of lane ``cuda:N``: its place among the visible GPUs."""
        ...

    @property
    def name(self) -> str:
        """What kind of GPU it is (``NVIDIA H100 80GB HBM3``): measurements are per kind."""
        ...

    @property
    def uuid(self) -> str:
        """The GPU itself, whatever index a process sees it at: its lane lock's name."""
        ...

    def memory_total(self) -> int:
        """Its memory, in MiB."""
        ...

    def memory_used(self) -> int:
        """Its memory in use now by every process, in MiB."""
        ...

    def providers(self) -> Sequence[Provider]:
        """The execution providers a worker runs its graph on, in order of preference."""
        ...

    def allocated(self, mib: int) -> None:
        """A worker warmed a shape that needs ``mib`` on the device: a real
        GPU's memory already shows it; a simulated one adds it."""
        ...


class SimulatedDevice:
    """A GPU of ``total_mib`` that computes on onnxruntime's CPU execution
    provider: the lane's worker, graphs and accounting run on it unchanged.
    Its memory in use is what its process was told it allocated."""

    def __init__(self, index: int = 0, total_mib: int = SIMULATED_MIB) -> None:
        self._index = index
        self.total_mib = total_mib
        self.used_mib = 0

    @property
    def index(self) -> int:
        return self._index

    @property
    def name(self) -> str:
        return f"simulated-{self.total_mib}MiB"

    @property
    def uuid(self) -> str:
        return f"simulated-{self._index}"

    def memory_total(self) -> int:
        return self.total_mib

    def memory_used(self) -> int:
        return self.used_mib

    def providers(self) -> Sequence[Provider]:
        return (CPU,)

    def allocated(self, mib: int) -> None:
        self.used_mib += mib


class NvmlError(RuntimeError):
    """NVML could not be loaded or answered with an error: the message says which, in one line."""


class _Memory(ctypes.Structure):
    _fields_ = [
        ("total", ctypes.c_ulonglong),
        ("free", ctypes.c_ulonglong),
        ("used", ctypes.c_ulonglong),
    ]


class Nvml:
    """The few NVML calls the lane makes, over ``libnvidia-ml.so.1``."""

    LIBRARY = "libnvidia-ml.so.1"

    def __init__(self, library: str = LIBRARY) -> None:
        try:
            self._lib = ctypes.CDLL(library)
        except OSError as exc:
            raise NvmlError(f"no NVIDIA driver: {library} cannot be loaded ({exc})") from None
        self._check(self._lib.nvmlInit_v2(), "nvmlInit")

    def _check(self, code: int, call: str) -> None:
        if code != 0:
            self._lib.nvmlErrorString.restype = ctypes.c_char_p
            message = self._lib.nvmlErrorString(code)
            text = message.decode() if isinstance(message, bytes) else str(code)
            raise NvmlError(f"NVML {call} failed: {text}")

    def count(self) -> int:
        count = ctypes.c_uint()
        self._check(self._lib.nvmlDeviceGetCount_v2(ctypes.byref(count)), "nvmlDeviceGetCount")
        return count.value

    def handle(self, entry: str) -> ctypes.c_void_p:
        """The device a ``CUDA_VISIBLE_DEVICES`` entry names: an index (PCI bus
        order) or a ``GPU-`` UUID."""
        handle = ctypes.c_void_p()
        if entry.isdigit():
            code = self._lib.nvmlDeviceGetHandleByIndex_v2(int(entry), ctypes.byref(handle))
        else:
            code = self._lib.nvmlDeviceGetHandleByUUID(entry.encode(), ctypes.byref(handle))
        self._check(code, f"device {entry!r}")
        return handle

    def text(self, call: str, handle: ctypes.c_void_p) -> str:
        buffer = ctypes.create_string_buffer(96)
        self._check(getattr(self._lib, call)(handle, buffer, ctypes.c_uint(96)), call)
        return buffer.value.decode()

    def memory(self, handle: ctypes.c_void_p) -> tuple[int, int]:
        """(total, used) in bytes."""
        info = _Memory()
        self._check(self._lib.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(info)), "memory")
        return info.total, info.used

    def driver(self) -> str:
        buffer = ctypes.create_string_buffer(96)
        self._check(self._lib.nvmlSystemGetDriverVersion(buffer, ctypes.c_uint(96)), "driver")
        return buffer.value.decode()


class NvmlDevice:
    """A real NVIDIA GPU: the ``index``-th visible one, named by ``entry``
    (its ``CUDA_VISIBLE_DEVICES`` entry), its memory read through NVML."""

    def __init__(self, nvml: Nvml, index: int, entry: str) -> None:
        self._nvml = nvml
        self._index = index
        self._handle = nvml.handle(entry)
        self._name = nvml.text("nvmlDeviceGetName", self._handle)
        self._uuid = nvml.text("nvmlDeviceGetUUID", self._handle)

    @property
    def index(self) -> int:
        return self._index

    @property
    def name(self) -> str:
        return self._name

    @property
    def uuid(self) -> str:
        return self._uuid

    def memory_total(self) -> int:
        return self._nvml.memory(self._handle)[0] // MIB

    def memory_used(self) -> int:
        return -(-self._nvml.memory(self._handle)[1] // MIB)

    def providers(self) -> Sequence[Provider]:
        return ((CUDA, {"device_id": self._index, **CUDA_OPTIONS}), CPU)

    def allocated(self, mib: int) -> None:
        """Nothing to add: the device's own count already has it."""


def visible_entries(env: Mapping[str, str], count: int) -> list[str]:
    """The GPUs processes may see, as ``CUDA_VISIBLE_DEVICES`` names them
    (``count`` GPUs by index when it is unset). CUDA stops at the first entry
    that names no device; so does this, at the first past ``count``."""
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return [str(i) for i in range(count)]
    entries = []
    for raw in value.split(","):
        entry = raw.strip()
        if entry.isdigit() and int(entry) >= count:
            break
        if not entry or (not entry.isdigit() and not entry.startswith(("GPU-", "MIG-"))):
            break
        entries.append(entry)
    return entries


def simulated_mib(env: Mapping[str, str] = os.environ) -> int:
    """The simulated device's memory: ``SYNAPSE_CUDA_SIMULATED_MIB``, else :data:`SIMULATED_MIB`."""
    value = env.get("SYNAPSE_CUDA_SIMULATED_MIB", "")
    return int(value) if value.isdigit() and int(value) > 0 else SIMULATED_MIB


__all__ = [
    "CUDA_OPTIONS",
    "Device",
    "Nvml",
    "NvmlDevice",
    "NvmlError",
    "SimulatedDevice",
    "simulated_mib",
    "visible_entries",
]
