"""The direct-ANE lane lock: flock on a per-user lock file, inherited by workers."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from synapse_ane_direct.lanelock import (
    LaneLock,
    RuntimeDirError,
    acquire,
    default_runtime_dir,
    holds_lane,
    lock_path,
    private_dir,
    system_temp_dir,
)
from synapse_core import LaneLocked

LANE = "ane:0"


def test_second_acquisition_fails_at_once_naming_the_holder(tmp_path: Path) -> None:
    with acquire(LANE, tmp_path), pytest.raises(LaneLocked) as info:
        acquire(LANE, tmp_path)
    message = str(info.value)
    assert f"pid {os.getpid()}" in message
    assert sys.argv[0] in message  # the holder's command
    assert "never kills a holder or bypasses" in message
    assert str(lock_path(LANE, tmp_path)) in message


def test_holder_record_is_written_into_the_lock_file(tmp_path: Path) -> None:
    with acquire(LANE, tmp_path) as lock:
        record = json.loads(lock.path.read_text())
        assert record["pid"] == os.getpid()
        assert record["command"] == lock.holder_record.command
        assert lock.holder.startswith(f"pid {os.getpid()} (")


def test_lanes_lock_independently(tmp_path: Path) -> None:
    with acquire("ane:0", tmp_path), acquire("ane:1", tmp_path) as other:
        assert other.path.name == "lane-ane_1.lock"


def test_release_then_reacquire_reuses_the_never_deleted_file(tmp_path: Path) -> None:
    first = acquire(LANE, tmp_path)
    inode = os.fstat(first.fd).st_ino
    first.close()
    assert first.path.exists()  # never deleted on release
    assert first.pass_fds == ()
    first.close()  # closing twice is harmless
    with acquire(LANE, tmp_path) as second:
        assert os.stat(second.path).st_ino == inode


def test_worker_that_inherited_the_descriptor_keeps_the_lane_locked(tmp_path: Path) -> None:
    lock = acquire(LANE, tmp_path)
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"],
        stdin=subprocess.PIPE,
        pass_fds=lock.pass_fds,
    )
    try:
        lock.close()  # the host lets go of its descriptor; the child still has it
        with pytest.raises(LaneLocked):
            acquire(LANE, tmp_path)
    finally:
        child.kill()
        child.wait()
    assert lock.path.exists()
    with acquire(LANE, tmp_path) as again:
        assert not again.closed


def test_lock_file_replaced_while_locking_is_detected_and_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = lock_path(LANE, tmp_path)
    real_flock = fcntl.flock
    calls: list[int] = []

    def flock_after_replacement(fd: int, operation: int) -> None:
        if not calls:
            # Another party swaps the file between our open() and flock().
            replacement = tmp_path / "replacement"
            replacement.write_text("")
            os.replace(replacement, path)
        calls.append(fd)
        real_flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", flock_after_replacement)
    with acquire(LANE, tmp_path) as lock:
        assert len(calls) == 2
        assert os.fstat(lock.fd).st_ino == os.stat(path).st_ino


def test_holds_lane_recognises_the_held_description(tmp_path: Path) -> None:
    with acquire(LANE, tmp_path) as lock:
        inherited = os.dup(lock.fd)  # what a worker gets through pass_fds
        other = os.open(lock.path, os.O_RDWR)
        try:
            assert holds_lane(inherited, lock.path)
            assert not holds_lane(other, lock.path)  # another description: lock is taken
            assert not holds_lane(inherited, tmp_path / "elsewhere.lock")
        finally:
            os.close(inherited)
            os.close(other)


def test_runtime_dir_defaults_to_xdg_runtime_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert default_runtime_dir() == tmp_path / "synapse"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    fallback = default_runtime_dir()
    assert fallback == system_temp_dir() / f"synapse-{os.getuid()}"
    # A host's own TMPDIR does not move the lock: other hosts would miss it.
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    assert default_runtime_dir() == fallback


def test_runtime_dir_is_created_private(tmp_path: Path) -> None:
    directory = private_dir(tmp_path / "a" / "synapse")
    assert directory.stat().st_mode & 0o777 == 0o700


def test_runtime_dir_open_to_others_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    with pytest.raises(RuntimeDirError, match="open to other users"):
        acquire(LANE, shared)


def test_runtime_dir_symlink_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(RuntimeDirError, match="not a directory"):
        acquire(LANE, link)


def test_lane_lock_is_a_lane_session_passing_its_descriptor(tmp_path: Path) -> None:
    from synapse_core.plugin import LaneSession

    with acquire(LANE, tmp_path) as lock:
        assert isinstance(lock, LaneSession)
        assert lock.pass_fds == (lock.fd,)
        assert isinstance(lock, LaneLock)
