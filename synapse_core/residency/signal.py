"""A broadcast "something changed" signal for state that tasks wait on."""

from __future__ import annotations

import anyio


class Signal:
    """``notify`` wakes every task in ``wait``; the event exists only while
    someone waits, since most notifications have no waiter."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        # Invariant: set ⇒ unset event with every current waiter on it;
        #   ``notify`` sets it and drops it, so a later wait makes a new one.
        self._event: anyio.Event | None = None

    def notify(self) -> None:
        if self._event is not None:
            self._event.set()
            self._event = None

    async def wait(self) -> None:
        if self._event is None:
            self._event = anyio.Event()
        await self._event.wait()
