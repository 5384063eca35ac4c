"""Threads for work the event loop must not wait on, run at a lower priority.

On a busy machine the kernel shares the cores between the event loop and
the threads tokenising a large request; at equal priority the loop waits its
turn behind them and every small request (``/health`` too) waits with it.
These threads lower their own priority (``nice`` 10, Linux only: there a
thread has a nice value of its own) once, when they start, so the loop comes
first. Each thread is the pool's own: no other work ever runs lowered.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel

T = TypeVar("T")
#: how much lower than the event loop's a background thread's priority is
NICE = 10


def lower_priority() -> None:
    """Lower the calling thread's priority by :data:`NICE`, where a thread has
    its own (Linux); elsewhere, or where it is not allowed, nothing."""
    if sys.platform != "linux":
        return
    tid = threading.get_native_id()
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + NICE)


class Background:
    """At most ``threads`` functions at once, each in a thread of lowered
    priority; the threads start on first use."""

    def __init__(self, threads: int, name: str) -> None:
        self.threads = threads
        self.name = name
        self._pool: ThreadPoolExecutor | None = None

    async def run(self, work: Callable[[], T]) -> T:
        """``work()`` in one of the threads. Like ``anyio.to_thread.run_sync``,
        a cancelled caller still waits for the work to end (a thread cannot
        be stopped), then the cancellation goes on."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, self.name, initializer=lower_priority)
        token = anyio.lowlevel.current_token()
        loop_thread = threading.get_ident()
        done = anyio.Event()

        def finished(_: Future[T]) -> None:
            if threading.get_ident() == loop_thread:
                done.set()  # it ended before the callback was added
                return
            with contextlib.suppress(RuntimeError):  # the event loop has ended meanwhile
                anyio.from_thread.run_sync(done.set, token=token)

        future = self._pool.submit(work)
        future.add_done_callback(finished)
        with anyio.CancelScope(shield=True):
            await done.wait()
        await anyio.lowlevel.checkpoint_if_cancelled()
        try:
            return future.result()
        finally:
            # An error of the work is raised with a traceback holding this
            # frame: were the future (which holds the error) still one of its
            # locals, the two would make a cycle, keeping every frame's
            # locals (a request's texts) alive until the cyclic collector runs.
            del future
