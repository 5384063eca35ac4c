"""One-shot events for the two hand-offs of every call.

A call crosses from its caller to its detached task and back, and each
crossing waits on an event with exactly one waiter. On asyncio,
``anyio.Event`` wraps an ``asyncio.Event``, which looks up the running loop
and keeps a list of waiter futures; a single waiter needs only the future,
at a fraction of the bytecode on the per-call path. Other backends use
anyio's event.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

import anyio


class OneShot(Protocol):
    """The part of :class:`anyio.Event` a hand-off uses."""

    def set(self) -> None: ...

    def is_set(self) -> bool: ...

    async def wait(self) -> None: ...


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class FutureEvent:
    """A one-shot event over a bare asyncio future, for a single waiter at a
    time (a cancelled waiter cancels the future, so two would share that)."""

    __slots__ = ("_future", "_loop", "_set")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        # Made by the first wait: a call's event is made before its request
        # is written, and waited for only after.
        self._future: asyncio.Future[None] | None = None
        self._set = False

    def set(self) -> None:
        if not self._set:
            self._set = True
            future = self._future
            if future is not None and not future.done():  # a cancelled waiter cancels it
                future.set_result(None)

    def is_set(self) -> bool:
        return self._set

    def _waitable(self) -> asyncio.Future[None]:
        future = self._future
        if future is None or future.done():  # first wait, or an earlier waiter was cancelled
            future = self._future = self._loop.create_future()
        return future

    async def wait(self) -> None:
        if self._set:
            return
        await self._waitable()

    async def wait_for(self, seconds: float) -> bool:
        """Wait until set, at most ``seconds``; whether it was set.

        A timer wakes the waiter, where a cancel scope would cost a task
        cancellation's machinery: every call with a deadline waits here.
        """
        if self._set:
            return True
        future = self._waitable()
        timer = self._loop.call_later(seconds, _wake, future)
        try:
            await future
        finally:
            timer.cancel()
        return self._set


def event_factory() -> Callable[[], OneShot]:
    """The cheapest one-shot event for the running backend."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # not asyncio
        return type(anyio.Event())
    return lambda: FutureEvent(loop)
