"""How many threads a worker's next request gets: the cores this process may
use, shared out among the lane's workers that are computing at that moment.

Each worker keeps a one-byte mark file of its own in the lane's folder,
mapped into memory: the byte is 1 while it computes a request. The other
workers read it from their own mapping: a request costs one ``flock`` per
other worker that reads busy, and a ``stat`` of the folder at most every
:data:`STAT_S`, where an ``flock`` per request and a listing of the folder
with two more per other worker cost 2% of one short text's request. The
worker holds an exclusive ``flock`` on its file for its whole life, and a
mark that reads busy is counted only while that lock is held: the kernel
drops the lock when the process dies, so a worker killed mid-request is
never counted as busy.
The folder is listed again when its modification time changes (a worker
started or left), while that time is within :data:`RECENT_NS` of the last
listing, and at least every :data:`RELIST_S` whatever the time says; its
time is read at most every :data:`STAT_S`, so a worker that starts is
counted within that (it takes far longer to load its model).

Alone, a worker uses every core (one short text then runs as fast as the
machine allows); two busy workers on two cores get one thread each instead
of four threads fighting for two cores.

A request of at most :data:`CLAIM_POSITIONS` positions (one short text)
that follows the worker's last request by more than :data:`BACK_TO_BACK_S`
takes its share without marking itself busy: it lasts a few milliseconds,
and a worker whose long request started beside it would otherwise run all
of that request on a fraction of the cores. It oversubscribes the cores for
those milliseconds instead. Short requests back to back (a client sending
its next call as soon as the last is answered) claim their share as any
request does: they would otherwise oversubscribe the cores all the time.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import math
import mmap
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from synapse_models.sessions import usable_cores as usable_cores

#: the transport's one lane
LANE_ID = "cpu:0"
#: requests of at most this many positions (rows x padded length) compute
#: without marking the lane busy (see the module docstring)
CLAIM_POSITIONS = 64
#: a short request this soon after the worker's last one claims its share
BACK_TO_BACK_S = 0.005
#: a mark file's name ends so: ``<pid>.<n>.mark``, the pid tells a dead
#: worker's mark, n two marks of one process
SUFFIX = ".mark"
#: a folder changed this recently is listed again even if its modification
#: time looks the same: file systems stamp it in ticks (some in whole
#: seconds), so a second change within the tick of the last listing keeps it
RECENT_NS = 2_000_000_000
#: the folder is listed at least this often (s), whatever its stamp says
#: (a cached one, over NFS)
RELIST_S = 1.0
#: the folder's modification time is read at most this often (s): the
#: ``stat`` is 9 µs of one short text's request, right after a forward pass
STAT_S = 0.02
_BUSY, _IDLE = 1, 0
_marks = itertools.count()


def lane_dir(lane_id: str) -> Path:
    """The folder of a lane's busy marks, per user: every host of the user shares the cores."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    name = lane_id.replace(":", "-").replace(os.sep, "-")
    return Path(tempfile.gettempdir()) / f"synapse-cpu-{uid}" / name


class _Mark:
    """Another worker's mark: its file, held open and mapped (read only; the
    mapping holds a descriptor of its own), and the file's inode, which tells
    a new worker's file renamed onto a dead one's name."""

    __slots__ = ("fd", "inode", "view")

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_RDONLY)
        try:
            self.inode = os.fstat(self.fd).st_ino
            self.view = mmap.mmap(self.fd, 1, access=mmap.ACCESS_READ)
        except BaseException:
            os.close(self.fd)
            raise

    def busy(self) -> bool:
        """Marked busy by a worker that is alive (still holds its file's lock)."""
        if self.view[0] != _BUSY:
            return False
        try:
            fcntl.flock(self.fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(self.fd, fcntl.LOCK_UN)  # its worker died mid-request
        return False

    def close(self) -> None:
        self.view.close()
        os.close(self.fd)


class CoreShare:
    """A worker's mark on its lane, and its share of the cores while it computes."""

    def __init__(
        self,
        directory: Path,
        cores: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], int] = time.time_ns,
    ) -> None:
        """``clock``: seconds, for the spacing of requests and listings;
        ``wall``: nanoseconds since the epoch, the clock of file times."""
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.directory = directory
        self.cores = cores or usable_cores()
        self.path = directory / f"{os.getpid()}.{next(_marks)}{SUFFIX}"
        self._fd, self._view = _own_mark(self.path)
        self._others: dict[str, _Mark] = {}
        self._listed = -1  # the folder's mtime when it was last listed
        self._listed_at = 0  # and the time of that listing (ns since the epoch)
        self._relist_at = -math.inf  # when to list it whatever its mtime says
        self._stat_at = -math.inf  # when to read its mtime again
        self._clock = clock
        self._wall = wall
        self._last_end = -math.inf
        self._forget_dead()

    def share(self) -> int:
        """The thread count of a request that does not mark itself busy: the
        cores divided by the busy workers and this one (at least one)."""
        return max(1, self.cores // (1 + self.busy_others()))

    @contextlib.contextmanager
    def computing(self, positions: int) -> Iterator[int]:
        """One request of ``positions`` (rows x padded length): yields its
        thread count (:meth:`enter`), and :meth:`leave` after it."""
        threads = self.enter(positions)
        try:
            yield threads
        finally:
            self.leave()

    def enter(self, positions: int) -> int:
        """A request of ``positions`` (rows x padded length) starts: its thread
        count, this worker marked busy until :meth:`leave` unless it is a
        sparse short request (see the module docstring). Plain calls, not a
        context manager: they run on every request, right after the caches
        are cold from the last forward pass, where each generator frame costs."""
        if positions <= CLAIM_POSITIONS and self._clock() - self._last_end > BACK_TO_BACK_S:
            return self.share()
        self._view[0] = _BUSY
        try:
            return self.share()
        except BaseException:
            self.leave()
            raise

    def leave(self) -> None:
        """The request :meth:`enter` started has ended."""
        self._view[0] = _IDLE
        self._last_end = self._clock()

    @contextlib.contextmanager
    def busy(self) -> Iterator[int]:
        """Marks this worker busy and yields its thread count: the cores divided
        by the busy workers, this one included (at least one)."""
        self._view[0] = _BUSY
        try:
            yield self.share()
        finally:
            self._view[0] = _IDLE

    def busy_others(self) -> int:
        """How many other workers of the lane are marked busy now."""
        self._refresh()
        return sum(mark.busy() for mark in self._others.values())

    def close(self) -> None:
        for mark in self._others.values():
            mark.close()
        self._others.clear()
        self._view.close()
        os.close(self._fd)  # drops the lock: from here on the mark never counts
        self.path.unlink(missing_ok=True)

    def _refresh(self) -> None:
        """List the lane's marks again if a worker may have come or gone since
        the last listing (see the module docstring)."""
        tick = self._clock()
        if tick < self._stat_at:
            return
        self._stat_at, now = tick + STAT_S, self._wall()
        try:
            changed = os.stat(self.directory).st_mtime_ns
        except OSError:
            return
        settled = changed == self._listed and self._listed_at - changed > RECENT_NS
        if settled and tick < self._relist_at:
            return
        self._listed, self._listed_at, self._relist_at = changed, now, tick + RELIST_S
        try:
            found = _marks_in(self.directory)
        except OSError:
            self._listed = -1  # list again next time
            return
        found.pop(self.path.name, None)
        for name, mark in list(self._others.items()):
            if found.get(name) != mark.inode:  # gone, or a new worker's file under its name
                del self._others[name]
                mark.close()
        for name in found.keys() - self._others.keys():
            try:
                self._others[name] = _Mark(self.directory / name)
            except (OSError, ValueError):  # gone, or out of descriptors: list again next time
                self._listed = -1

    def _forget_dead(self) -> None:
        """Remove the marks of workers that no longer exist (killed before
        their cleanup): staged ones too, and the ``.busy`` files of versions
        before the marks were mapped."""
        for pattern in (f"*{SUFFIX}*", "*.busy"):
            for entry in self.directory.glob(pattern):
                pid = entry.name.split(".", 1)[0]
                if pid.isdigit() and not _alive(int(pid)):
                    entry.unlink(missing_ok=True)


def _marks_in(directory: Path) -> dict[str, int]:
    """The mark files in ``directory``, by name, with their inodes (from
    ``stat``: overlay file systems list other numbers than ``stat`` gives)."""
    found = {}
    with os.scandir(directory) as entries:
        for entry in entries:
            if entry.name.endswith(SUFFIX):
                with contextlib.suppress(FileNotFoundError):  # left meanwhile
                    found[entry.name] = entry.stat(follow_symlinks=False).st_ino
    return found


def _own_mark(path: Path) -> tuple[int, mmap.mmap]:
    """This worker's mark file, locked for its life and mapped: written whole
    under another name, then renamed into place, so no other worker ever
    maps it before it holds its byte."""
    staging = path.with_name(path.name + ".new")
    fd = os.open(staging, os.O_CREAT | os.O_TRUNC | os.O_RDWR, 0o600)
    view: mmap.mmap | None = None
    try:
        os.write(fd, bytes([_IDLE]))
        fcntl.flock(fd, fcntl.LOCK_EX)
        view = mmap.mmap(fd, 1, access=mmap.ACCESS_WRITE)
        os.rename(staging, path)
    except BaseException:
        if view is not None:
            view.close()  # its own descriptor would keep the lock
        os.close(fd)
        staging.unlink(missing_ok=True)
        raise
    return fd, view


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
