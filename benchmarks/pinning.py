"""Running a measurement with its processes on one CPU.

A short exchange with a worker on another core spends much of its time in
the wake-ups between the two processes: how long a core idles, whether the
kernel moves the woken worker, and, on a virtual machine, the hypervisor's
halt polling. Those move a p50 by tens of microseconds from one run to the
next, in both directions, whatever the host's own code costs. With every
process on one CPU the exchange is a plain hand-over on that CPU, and what
is left of the difference between two ways of making it is their CPU time.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress


@contextmanager
def one_cpu(*pids: int) -> Iterator[bool]:
    """Pin this process and ``pids`` to one CPU of this process's set for the
    block, then give each its affinity back. Yields False (and pins nothing)
    where the platform cannot pin (``os.sched_setaffinity`` is Linux-only)."""
    if not hasattr(os, "sched_setaffinity"):
        yield False
        return
    processes = (0, *pids)
    saved = {pid: os.sched_getaffinity(pid) for pid in processes}
    cpu = min(saved[0])
    try:
        for pid in processes:
            os.sched_setaffinity(pid, {cpu})
        yield True
    finally:
        for pid, cpus in saved.items():
            with suppress(ProcessLookupError):  # a worker that is gone needs no restoring
                os.sched_setaffinity(pid, cpus)
