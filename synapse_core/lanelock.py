"""The cross-process lock of a device lane that one host at a time may use
(the direct Neural Engine's, a GPU's): :func:`acquire_lane_lock` in the host,
:func:`holds_lane` in a worker that inherited the descriptor.

One lock file per lane lives in a private per-user runtime directory. It is
locked with ``flock``, which belongs to the *open file description*: workers
that inherit the descriptor (``pass_fds``) share the lock, so the lane stays
held while any of them is alive, even if the host dies. (``lockf``/POSIX
record locks would be per process and dropped by any close, so they cannot
do this.)

Rules, each the answer to a known race or accident:

- the lock file is never deleted (deleting it lets two holders lock two
  different inodes under one name);
- after locking, the path must still name the locked inode, or we retry;
- releasing is closing the host's descriptor, never ``LOCK_UN``, which would
  unlock the description the workers still share;
- a held lock fails at once with :class:`~synapse_core.errors.LaneLocked`
  naming the holder; nothing ever kills a holder or bypasses its lock, and a
  worker that does not hold it refuses to touch the device.
"""

from __future__ import annotations

import fcntl
import os
import re
import socket
import stat
import sys
import tempfile
import time
from pathlib import Path

import msgspec

from .errors import LaneLocked, RuntimeDirError
from .transport import LaneSession

#: Attempts when the lock file is replaced between ``open`` and ``flock``.
MAX_ATTEMPTS = 16
_HOLDER_MAX = 4096
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


class Holder(msgspec.Struct, frozen=True):
    """Who took a lane lock, written into the lock file for a second host to read."""

    pid: int
    host: str
    started: float  # Unix time
    command: str

    @classmethod
    def current(cls) -> Holder:
        command = " ".join([sys.executable, *sys.argv]) if sys.argv else sys.executable
        return cls(os.getpid(), socket.gethostname(), time.time(), command)

    def describe(self) -> str:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))
        return f"pid {self.pid} ({self.command}) on {self.host}, since {since}"


def default_runtime_dir() -> Path:
    """``$XDG_RUNTIME_DIR/synapse``, else ``<system temp>/synapse-<uid>``.

    A relative ``XDG_RUNTIME_DIR`` is ignored, as the XDG base-directory spec
    requires: it would resolve against each host's working directory, and two
    hosts would each lock a lane file of their own. The system temp dir is
    ``/tmp`` (or ``/var/tmp``), not ``$TMPDIR``: two hosts with different
    ``TMPDIR`` settings must still find the same lock.
    """
    xdg = os.environ.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(xdg):
        return Path(xdg) / "synapse"
    return system_temp_dir() / f"synapse-{os.getuid()}"


def system_temp_dir() -> Path:
    for candidate in ("/tmp", "/var/tmp"):
        if os.path.isdir(candidate):
            return Path(candidate)
    return Path(tempfile.gettempdir())


def private_dir(path: Path) -> Path:
    """Create ``path`` (mode 0o700) or check that an existing one is ours alone."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(path)
    except OSError as exc:
        raise RuntimeDirError(f"cannot create lane-lock directory {path}: {exc}") from None
    # lstat: a symlink planted in a shared temp dir must not redirect our locks.
    if not stat.S_ISDIR(st.st_mode):
        raise RuntimeDirError(f"lane-lock directory {path} is not a directory; remove it")
    if st.st_uid != os.getuid():
        raise RuntimeDirError(
            f"lane-lock directory {path} belongs to uid {st.st_uid}, not {os.getuid()}; "
            "set XDG_RUNTIME_DIR to a directory of your own"
        )
    if st.st_mode & 0o077:
        raise RuntimeDirError(
            f"lane-lock directory {path} is open to other users (mode "
            f"{stat.S_IMODE(st.st_mode):o}); run `chmod 700 {path}`"
        )
    return path


def lane_lock_path(lane_id: str, runtime_dir: Path, prefix: str = "lane") -> Path:
    return runtime_dir / f"{prefix}-{_UNSAFE.sub('_', lane_id)}.lock"


class LaneLock(LaneSession):
    """A held lane: the host's descriptor of the locked lock file.

    ``pass_fds`` hands the descriptor to every worker launched on the lane.
    :meth:`close` closes only the host's descriptor: workers that inherited
    it keep the lane locked until they exit.
    """

    def __init__(self, lane_id: str, path: Path, fd: int, holder: Holder) -> None:
        self.lane_id = lane_id
        self.path = path
        self.holder_record = holder
        self.holder = holder.describe()
        self._fd: int | None = fd
        self.pass_fds: tuple[int, ...] = (fd,)

    @property
    def fd(self) -> int:
        if self._fd is None:
            raise ValueError(f"the lock of lane {self.lane_id} was already released")
        return self._fd

    @property
    def closed(self) -> bool:
        return self._fd is None

    def close(self) -> None:
        # Never LOCK_UN (see the module docstring) and never unlink the file.
        if self._fd is not None:
            fd, self._fd = self._fd, None
            self.pass_fds = ()
            os.close(fd)

    def __enter__(self) -> LaneLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def acquire_lane_lock(
    lane_id: str, runtime_dir: Path | None = None, name: str = "", prefix: str = "lane"
) -> LaneLock:
    """Lock ``lane_id`` for this process, or raise :class:`LaneLocked` at once.

    ``name``: what the lock file is named after when not the lane (a GPU's
    UUID: two hosts that see one GPU at different indexes contend for one
    lock); ``prefix``: the file name's first part (a lane kind's own)."""
    directory = private_dir(runtime_dir if runtime_dir is not None else default_runtime_dir())
    path = lane_lock_path(name or lane_id, directory, prefix)
    for _ in range(MAX_ATTEMPTS):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise LaneLocked(_held_message(lane_id, path, holder)) from None
        except BaseException:
            os.close(fd)
            raise
        if _names_fd(path, fd):
            break
        os.close(fd)  # the file was replaced between open and flock: lock the new one
    else:
        raise LaneLocked(
            f"could not lock lane {lane_id}: {path} was replaced {MAX_ATTEMPTS} times while "
            "locking; find what keeps deleting files in that directory"
        )
    holder = Holder.current()
    _write_holder(fd, holder)
    return LaneLock(lane_id, path, fd, holder)


def holds_lane(fd: int, path: str | Path) -> bool:
    """Whether ``fd`` (e.g. inherited by a worker) is a held lock on ``path``.

    Locking a description that already holds the lock is a no-op, so this
    succeeds exactly when this description holds it or nobody does (and then
    takes it): either way the caller may use the lane.
    """
    try:
        if not _names_fd(Path(path), fd):
            return False
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def _names_fd(path: Path, fd: int) -> bool:
    try:
        on_disk = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (on_disk.st_dev, on_disk.st_ino) == (held.st_dev, held.st_ino)


def _write_holder(fd: int, holder: Holder) -> None:
    data = msgspec.json.encode(holder)
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


def _read_holder(fd: int) -> Holder | None:
    try:
        return msgspec.json.decode(os.pread(fd, _HOLDER_MAX, 0), type=Holder)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None


def _held_message(lane_id: str, path: Path, holder: Holder | None) -> str:
    who = (
        holder.describe()
        if holder is not None
        else "a process that has not written its record yet (it may be starting)"
    )
    return (
        f"lane {lane_id} is held by {who}, or by a worker it started (workers keep the "
        f"lane locked until they exit); lock file {path}. Wait for that host to finish, "
        "or stop it yourself if it is yours: Synapse never kills a holder or bypasses "
        "a live lane lock."
    )
