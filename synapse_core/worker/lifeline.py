"""A worker ends soon after its host does, even while busy.

A worker whose host was killed would otherwise run on, and a direct-ANE
worker would keep the device's lane locked. A daemon thread watches the host
and ends the process with ``os._exit`` once the host is gone, whatever the
main thread is doing.

On Linux the thread waits on a pidfd of the host (woken the moment the host
exits); elsewhere it checks ``getppid()`` a few times a second. Linux's
``PR_SET_PDEATHSIG`` is not used: it fires when the *thread* that forked the
worker exits, and trio forks from a worker thread that exits after 10 s idle,
which would kill healthy workers.
"""

from __future__ import annotations

import os
import select
import sys
import threading
from collections.abc import Callable

#: exit status of a worker whose host is gone
HOST_GONE = 75
POLL_S = 0.25


def _leave(host: int, exit: Callable[[int], object]) -> None:
    print(f"worker {os.getpid()}: host process {host} is gone; exiting", file=sys.stderr)
    exit(HOST_GONE)


def watch_host(
    host_pid: int | None, *, exit: Callable[[int], object] = os._exit, poll_s: float = POLL_S
) -> threading.Thread | None:
    """Start the watch; ``host_pid`` defaults to this process's parent.

    ``exit`` ends the process (tests pass a recorder); with the host already
    gone it is called at once and no thread starts.
    """
    parent = os.getppid()
    host = parent if host_pid is None else host_pid
    pidfd = _pidfd(host)
    if pidfd == -1:
        _leave(host, exit)
        return None

    def by_pidfd() -> None:
        assert pidfd is not None
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        while not poller.poll():
            pass
        os.close(pidfd)
        _leave(host, exit)

    def by_parent() -> None:
        event = threading.Event()
        while not event.wait(poll_s):
            if os.getppid() != parent or not _exists(host):
                _leave(host, exit)
                return

    target = by_pidfd if pidfd is not None else by_parent
    thread = threading.Thread(target=target, name="synapse host watch", daemon=True)
    thread.start()
    return thread


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _pidfd(pid: int) -> int | None:
    """A pidfd of ``pid``; -1 if there is no such process; None where pidfds are missing."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        return int(opener(pid))
    except ProcessLookupError:
        return -1
    except OSError:
        return None  # e.g. a kernel before 5.3, or a sandbox that forbids it
