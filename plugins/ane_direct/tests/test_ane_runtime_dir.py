"""Where lane locks live: only an absolute ``XDG_RUNTIME_DIR`` counts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from synapse_ane_direct import lanelock
from synapse_ane_direct.lanelock import acquire, default_runtime_dir, system_temp_dir
from synapse_core import LaneLocked


@pytest.mark.parametrize("value", ["run", "./run", "run/user/1000", "~/run"])
def test_relative_xdg_runtime_dir_is_ignored_for_the_lane_lock(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The XDG base-directory spec: a relative path is invalid and must be
    # ignored. Taking it would put each host's lock under its own working
    # directory, and two hosts would both "hold" the lane.
    monkeypatch.setenv("XDG_RUNTIME_DIR", value)
    assert default_runtime_dir() == system_temp_dir() / f"synapse-{os.getuid()}"


def test_hosts_in_different_directories_meet_at_one_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Keep the fallback inside tmp_path, away from the machine's real locks.
    monkeypatch.setattr(lanelock, "system_temp_dir", lambda: tmp_path / "system-temp")
    monkeypatch.setenv("XDG_RUNTIME_DIR", "runtime")  # relative: ignored
    first_cwd, second_cwd = tmp_path / "a", tmp_path / "b"
    for cwd in (first_cwd, second_cwd):
        (cwd / "runtime").mkdir(parents=True, mode=0o700)
    monkeypatch.chdir(first_cwd)
    held = acquire("ane:0")
    try:
        assert held.path.is_absolute()
        monkeypatch.chdir(second_cwd)
        with pytest.raises(LaneLocked):
            acquire("ane:0").close()
    finally:
        held.close()


def test_absolute_xdg_runtime_dir_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert default_runtime_dir() == tmp_path / "synapse"
    lock = acquire("ane:0")
    try:
        assert lock.path.parent == tmp_path / "synapse"
    finally:
        lock.close()
