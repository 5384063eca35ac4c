"""Idle models let go: a model with no call for its ``idle_unload_s`` has its
workers retired (exits confirmed, reservations refunded, as ``Host.retire``
does), and its next call starts them again, as a first call does; a call
that comes while they are being let go waits for their exits (within its
deadline), then starts them again, never refused as retired.

The host checks every so often in a task of its own (:meth:`Idle.run`); a
test drives :meth:`Idle.unload` itself, with a fake clock, so nothing waits
on real time.
"""

from __future__ import annotations

import anyio

from .config import HostConfig
from .deadline import Clock
from .replicas import for_each
from .residency.worker import Phase
from .roster import Roster

#: the longest and shortest time between two checks for idle models
CHECK_MAX_S = 30.0
CHECK_MIN_S = 0.05
#: phases of a worker that holds (or is about to hold) a process
RESIDENT = (Phase.STARTING, Phase.READY, Phase.RECOVERING, Phase.EXIT_UNCONFIRMED)


class Idle:
    """Which models have gone without a call for their ``idle_unload_s``,
    and the retirement of their workers."""

    def __init__(self, config: HostConfig, clock: Clock, roster: Roster) -> None:
        self._clock = clock
        self._roster = roster
        #: per model that is let go when idle, its idle_unload_s
        self.limits: dict[str, float] = {}
        for spec in config.models:
            limit = config.idle_unload_of(spec)
            if limit is not None:
                self.limits[spec.name] = limit
        #: per model, when it was last called (or found busy)
        self._last: dict[str, float] = {}
        #: per model whose workers are being let go, set once their exits are confirmed
        # Invariant: a model is here only while :meth:`unload` retires its workers.
        self.unloading: dict[str, anyio.Event] = {}

    def touch(self, model: str) -> None:
        """``model`` is called now."""
        if model in self.limits:
            self._last[model] = self._clock()

    def resident(self, model: str) -> bool:
        """Whether any worker of ``model`` has (or is starting) a process."""
        return any(w.phase in RESIDENT for w in self._roster.live(model))

    async def unload(self, skip: set[str]) -> list[str]:
        """Retire the workers of every model idle past its limit (but those
        in ``skip``: retired already); the models let go. A model with a call
        in flight is busy, not idle: its time starts again."""
        now = self._clock()
        due = [
            model
            for model, last in list(self._last.items())
            if now - last >= self.limits[model] and model not in skip
        ]
        gone = []
        sups = self._roster.supervisors
        for model in due:
            workers = self._roster.live(model)
            if any(w.inflight for w in workers):
                self._last[model] = now
                continue
            del self._last[model]
            done = self.unloading[model] = anyio.Event()
            try:
                await for_each(lambda w: sups[w.lane.lane_id].retire(w), workers)
            finally:
                del self.unloading[model]
                done.set()  # calls that came meanwhile start the model again
            gone.append(model)
        return gone

    def interval(self) -> float:
        """How often to check: a quarter of the shortest limit, within bounds."""
        return min(max(min(self.limits.values()) / 4, CHECK_MIN_S), CHECK_MAX_S)

    async def run(self, skip: set[str]) -> None:
        """Check for idle models every :meth:`interval` for the host's life."""
        while True:
            await anyio.sleep(self.interval())
            await self.unload(skip)
