"""The one-shot event of each of a call's two hand-offs.

A call crosses from its caller to its detached task and back, and each
crossing waits on an ``anyio.Event`` with exactly one waiter. Code that only
sets and waits takes this protocol, so a fake (say, in a test) can stand in.
"""

from __future__ import annotations

from typing import Protocol


class OneShot(Protocol):
    """The part of :class:`anyio.Event` a hand-off uses."""

    def set(self) -> None: ...

    def is_set(self) -> bool: ...

    async def wait(self) -> None: ...
