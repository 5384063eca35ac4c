"""The cross-process lock of a GPU lane, one host at a time per GPU: the
plugin API's lane lock (:func:`synapse_core.plugin.acquire_lane_lock`, whose
module docstring gives its rules), its files named ``cuda-<GPU UUID>.lock``:
named by the GPU's UUID, not by its index, two hosts that see one GPU at
different indexes (``CUDA_VISIBLE_DEVICES``) still contend for one lock."""

from __future__ import annotations

from pathlib import Path

from synapse_core.plugin import LaneLock, acquire_lane_lock, holds_lane, lane_lock_path

#: the lock files' first part
PREFIX = "cuda"

__all__ = ["LaneLock", "acquire", "holds_lane", "lock_path"]


def acquire(lane_id: str, runtime_dir: Path | None = None, name: str = "") -> LaneLock:
    """Lock ``lane_id`` (its file named after ``name``, the GPU's UUID, when
    given) for this process, or raise ``LaneLocked`` at once."""
    return acquire_lane_lock(lane_id, runtime_dir, name, PREFIX)


def lock_path(name: str, runtime_dir: Path) -> Path:
    """The lock file of the GPU (or lane) ``name`` in ``runtime_dir``."""
    return lane_lock_path(name, runtime_dir, PREFIX)
