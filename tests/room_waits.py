"""Ending a wait for lane room at its deadline without racing real time.

The host runs on a :class:`~synapse_core.FakeClock` and a call's deadline is
far ahead on it, so its room wait sleeps (in real time) for as long as that
and never ends by itself during a test. :func:`to_just_before` moves the clock
to a millisecond before the deadline and wakes the lane's waiters: each looks
again, still finds no room, and waits the millisecond left, so its deadline
passes in that wait (``CapacityExhausted``), after whatever the test set up.
"""

from __future__ import annotations

import synapse_core as synapse

#: what is left of the deadline when the waiters look again (real seconds)
LEFT_S = 0.001


def to_just_before(clock: synapse.FakeClock, when: float, host: synapse.Host, model: str) -> None:
    """Move ``clock`` to just before ``when`` and wake the waiters of
    ``model``'s lane (a lane change that frees nothing)."""
    clock.advance(when - LEFT_S - clock())
    worker = host.worker(model)
    assert worker is not None
    worker.lane.notify()
