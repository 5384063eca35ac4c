"""A description of the machine a run happened on, for the results file."""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

DISTRIBUTIONS = ("synapse-core", "synapse-mock-transport", "anyio", "trio", "msgspec", "pluggy")


def _cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


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


def describe() -> dict[str, Any]:
    return {
        "cores": os.cpu_count() or 1,
        "usable_cores": _usable_cores(),
        "cpu": _cpu_model(),
        "memory_mib": _memory_mib(),
        "system": platform.system(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "accelerator": "none (mock transport)",
        "versions": {name: _version(name) for name in DISTRIBUTIONS},
    }
