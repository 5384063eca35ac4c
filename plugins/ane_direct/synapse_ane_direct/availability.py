"""Whether the direct Neural Engine path can run on this machine (loads nothing).

Kept apart from :mod:`.hardware` so the host can ask without importing numpy
or the program generator.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Callable

FRAMEWORK = "/System/Library/PrivateFrameworks/AppleNeuralEngine.framework"


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
            f"AppleNeuralEngine framework; this system is {system!r}. Serve the model on the CPU "
            "lane here (minilm, with synapse-cpu) or a mock-transport model; "
            "SYNAPSE_ANE_DEVICE=simulated runs a simulated device, for tests"
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
