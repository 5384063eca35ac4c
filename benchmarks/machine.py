"""A description of the machine a run happened on, for the results file."""

from __future__ import annotations

import contextlib
import os
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

DISTRIBUTIONS = ("synapse-core", "synapse-mock-transport", "anyio", "trio", "msgspec", "pluggy")
#: the vector instructions onnxruntime's kernels pick between: int8's speedup
#: over float32 depends on them (VNNI has an int8 dot product, AVX2 does not)
VECTOR_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "amx_int8")


def _cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> list[str] | None:
    """Which of :data:`VECTOR_FLAGS` the CPU has; ``None`` where the system does not say."""
    with contextlib.suppress(OSError):
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("flags"):
                have = set(line.split(":", 1)[1].split())
                return [flag for flag in VECTOR_FLAGS if flag in have]
    return None


def _memory_mib() -> int | None:
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    return None


def _usable_cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def load_average() -> list[float] | None:
    """1, 5 and 15 minute load averages: other work on the machine skews latencies."""
    if not hasattr(os, "getloadavg"):
        return None
    return [round(x, 2) for x in os.getloadavg()]


def cpu_times() -> list[int] | None:
    """The machine's CPU time counters (``/proc/stat``'s ``cpu`` line, in
    ticks), or ``None`` where there is no such file."""
    stat = Path("/proc/stat")
    if not stat.exists():
        return None
    fields = stat.read_text().split("\n", 1)[0].split()
    return [int(x) for x in fields[1:]]


def steal_fraction(before: list[int] | None, after: list[int] | None) -> float | None:
    """The share of CPU time between two :func:`cpu_times` readings that a
    hypervisor gave to other guests (``steal``, the eighth counter): on a
    virtual machine, time this run's processes waited for a CPU that was
    not there, which slows every figure and moves the processes around."""
    if before is None or after is None or len(before) < 8 or len(after) < 8:
        return None
    total = sum(after) - sum(before)
    return round((after[7] - before[7]) / total, 4) if total > 0 else None


def cpu_idle() -> dict[str, Any] | None:
    """How an idle CPU waits (Linux ``cpuidle``): its driver and governor and,
    where the guest halt-poll driver is loaded, how long it polls before
    halting. On a virtual machine a halted CPU wakes through the hypervisor,
    which costs a round trip between processes tens of microseconds; ``None``
    where the system does not say."""
    root = Path("/sys/devices/system/cpu/cpuidle")
    if not root.is_dir():
        return None
    found: dict[str, Any] = {}
    for name in ("current_driver", "current_governor"):
        with contextlib.suppress(OSError):
            found[name.removeprefix("current_")] = (root / name).read_text().strip()
    with contextlib.suppress(OSError, ValueError):
        poll = Path("/sys/module/haltpoll/parameters/guest_halt_poll_ns").read_text()
        found["guest_halt_poll_ns"] = int(poll)
    return found or None


def describe() -> dict[str, Any]:
    return {
        "cores": os.cpu_count() or 1,
        "usable_cores": _usable_cores(),
        "cpu": _cpu_model(),
        "cpu_flags": cpu_flags(),
        "memory_mib": _memory_mib(),
        "system": platform.system(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "accelerator": "none (mock transport)",
        "cpu_idle": cpu_idle(),
        "versions": {name: _version(name) for name in DISTRIBUTIONS},
    }
