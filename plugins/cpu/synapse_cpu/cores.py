"""How many threads a worker's next request gets: the cores this process may
use, shared out among the lane's workers that are computing at that moment.

Each worker holds an exclusive ``flock`` on a file of its own in the lane's
folder while it computes a request, and counts the other files locked at
that moment. The kernel drops a lock when its process dies, so a killed
worker is never counted as busy. Alone, a worker uses every core (one short
text then runs as fast as the machine allows); two busy workers on two cores
get one thread each instead of four threads fighting for two cores.

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
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

#: the transport's one lane
LANE_ID = "cpu:0"
#: requests of at most this many positions (rows x padded length) compute
#: without marking the lane busy (see the module docstring)
CLAIM_POSITIONS = 64
#: a short request this soon after the worker's last one claims its share
BACK_TO_BACK_S = 0.005
_marks = itertools.count()


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, else all)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1  # pragma: no cover - Linux has affinity masks


def lane_dir(lane_id: str) -> Path:
    """The folder of a lane's busy marks, per user: every host of the user shares the cores."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    name = lane_id.replace(":", "-").replace(os.sep, "-")
    return Path(tempfile.gettempdir()) / f"synapse-cpu-{uid}" / name


class CoreShare:
    """A worker's mark on its lane, and its share of the cores while it computes."""

    def __init__(
        self,
        directory: Path,
        cores: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.directory = directory
        self.cores = cores or usable_cores()
        # ``<pid>.<n>.busy``: the pid tells a dead worker's mark, n two marks of one process
        self.path = directory / f"{os.getpid()}.{next(_marks)}.busy"
        self._fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600)
        self._others: dict[str, int] = {}
        self._clock = clock
        self._last_end = -math.inf
        self._forget_dead()

    def share(self) -> int:
        """The thread count of a request that does not mark itself busy: the
        cores divided by the busy workers and this one (at least one)."""
        return max(1, self.cores // (1 + self.busy_others()))

    @contextlib.contextmanager
    def computing(self, positions: int) -> Iterator[int]:
        """One request of ``positions`` (rows x padded length): yields its
        thread count, marking this worker busy meanwhile unless it is a
        sparse short request (see the module docstring)."""
        sparse = self._clock() - self._last_end > BACK_TO_BACK_S
        try:
            if positions <= CLAIM_POSITIONS and sparse:
                yield self.share()
            else:
                with self.busy() as threads:
                    yield threads
        finally:
            self._last_end = self._clock()

    @contextlib.contextmanager
    def busy(self) -> Iterator[int]:
        """Marks this worker busy and yields its thread count: the cores divided
        by the busy workers, this one included (at least one)."""
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield self.share()
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def busy_others(self) -> int:
        """How many other workers of the lane hold their mark now."""
        busy = 0
        try:
            names = [n for n in os.listdir(self.directory) if n.endswith(".busy")]
        except OSError:
            return 0
        for gone in self._others.keys() - set(names):
            os.close(self._others.pop(gone))
        for name in names:
            if name == self.path.name:
                continue
            fd = self._others.get(name)
            if fd is None:
                try:
                    fd = os.open(self.directory / name, os.O_RDONLY)
                except OSError:
                    continue
                self._others[name] = fd
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                busy += 1
            else:
                fcntl.flock(fd, fcntl.LOCK_UN)
        return busy

    def close(self) -> None:
        for fd in self._others.values():
            os.close(fd)
        self._others.clear()
        os.close(self._fd)
        self.path.unlink(missing_ok=True)

    def _forget_dead(self) -> None:
        """Remove the marks of workers that no longer exist (killed before their cleanup)."""
        for entry in self.directory.glob("*.busy"):
            pid = entry.name.split(".", 1)[0]
            if pid.isdigit() and not _alive(int(pid)):
                entry.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
