"""Absolute deadlines and the clock they are measured on."""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
import attrs

T = TypeVar("T")

Clock = Callable[[], float]
"""A monotonic clock in seconds. The host takes one so tests can control time."""

monotonic: Clock = time.monotonic


@attrs.frozen
class Deadline:
    """An absolute point on the host's monotonic clock.

    A deadline bounds admission waits and every exchange of a call; it is
    absolute so retries and later groups cannot stretch it.
    """

    when: float = attrs.field()

    @when.validator
    def _a_number(self, attribute: attrs.Attribute[float], value: float) -> None:
        # NaN compares false with every time: it would never expire, nor
        # count as "no deadline"; refuse it before any call can carry it.
        if math.isnan(value):
            raise ValueError("a deadline must be a number of seconds, got nan")

    @classmethod
    def after(cls, seconds: float, *, clock: Clock = monotonic) -> Deadline:
        """The deadline ``seconds`` from now on ``clock``; ``ValueError`` for NaN."""
        return cls(clock() + seconds)

    @classmethod
    def at(cls, monotonic_seconds: float) -> Deadline:
        """The deadline at an absolute ``time.monotonic()`` reading."""
        return cls(monotonic_seconds)

    @classmethod
    def never(cls) -> Deadline:
        return _NEVER

    def remaining(self, clock: Clock = monotonic) -> float:
        """Seconds left (``inf`` for no deadline, never negative)."""
        return max(0.0, self.when - clock())

    def expired(self, clock: Clock = monotonic) -> bool:
        return self.when != math.inf and clock() >= self.when


_NEVER = Deadline(math.inf)


async def wait_bounded(
    wait: Callable[[], Awaitable[T]], deadline: Deadline, clock: Clock, error: Exception
) -> T:
    """Await ``wait()`` and return its result, but raise ``error`` once
    ``deadline`` passes."""
    if deadline.when == math.inf:
        return await wait()  # no deadline: a cancel scope would only cost time
    remaining = deadline.remaining(clock)
    if remaining <= 0:
        raise error
    with anyio.move_on_after(remaining):
        return await wait()
    raise error


def check_deadline(deadline: object) -> None:
    """A ``TypeError`` that says what to pass, unless ``deadline`` is a
    :class:`Deadline` or ``None`` (a bare number could mean seconds from now
    or a clock reading; the caller must say which)."""
    if deadline is not None and not isinstance(deadline, Deadline):
        hint = (
            f" (for {deadline!r} seconds from now, pass Deadline.after({deadline!r}))"
            if isinstance(deadline, int | float) and not isinstance(deadline, bool)
            else ""
        )
        raise TypeError(f"deadline must be a Deadline or None, got {type(deadline).__name__}{hint}")


class FakeClock:
    """A clock that only moves when told to; for deterministic tests."""

    def __init__(self, start: float = 1000.0) -> None:
        # Invariant: never goes back (``advance`` takes seconds to move on).
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
