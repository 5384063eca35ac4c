"""The cross-process lock of a direct-ANE lane: the plugin API's lane lock
(:func:`synapse_core.plugin.acquire_lane_lock`, whose module docstring gives
its rules), its files named ``lane-<lane>.lock``."""

from __future__ import annotations

from synapse_core.plugin import (
    LaneLock,
    RuntimeDirError,
    default_runtime_dir,
    holds_lane,
    private_dir,
    system_temp_dir,
)
from synapse_core.plugin import acquire_lane_lock as acquire
from synapse_core.plugin import lane_lock_path as lock_path

__all__ = [
    "LaneLock",
    "RuntimeDirError",
    "acquire",
    "default_runtime_dir",
    "holds_lane",
    "lock_path",
    "private_dir",
    "system_temp_dir",
]
