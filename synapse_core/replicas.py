"""The workers that serve one model (its entry's ``workers``), and which takes a call.

A model served by more than one worker sends each new call to one of them,
and that call stays on it for all its requests (its order, its head start
and its no-replay rule are one worker's). The choice, in order:

1. an idle worker that takes work: no call in it, so nothing to wait for;
2. else an empty slot (never started, or its worker exited): the host starts
   a worker there, and the call waits for its hello;
3. else a busy worker: one that takes work before one that does not, then
   one without a bulk call (whose requests a short call would wait behind)
   before one with, then the one with the fewest calls; a failed worker
   only when every one has failed.

With ``workers = 1`` this is the single worker's rule it has always been.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import anyio
import attrs

from .residency.worker import Phase, Worker


def _load(worker: Worker) -> tuple[bool, bool, bool, int]:
    """Sorts the busy workers: the one a call would wait least on first."""
    return (
        worker.phase is Phase.FAILED,
        not worker.takes_work,
        worker.inflight > worker.small_inflight,  # a bulk call is in it
        worker.inflight,
    )


@attrs.define(eq=False)
class Replicas:
    """A model's worker slots; only the host's roster fills them (``fill``)."""

    # Invariant: one slot per worker the entry asks for, in a fixed order; a
    #   slot's worker is replaced only once it exited (or, by an explicit
    #   load, failed).
    slots: list[Worker | None]

    @classmethod
    def of(cls, count: int) -> Replicas:
        return cls([None] * count)

    def live(self) -> list[Worker]:
        """The workers in the slots that are not gone for good, in slot order."""
        return [w for w in self.slots if w is not None and w.phase is not Phase.EXITED]

    def first(self) -> Worker | None:
        """The first slot's worker, or the first live one (what a tool shows)."""
        live = self.live()
        return live[0] if live else self.slots[0]

    def choose(self) -> Worker | int:
        """The worker a new call goes to, or the index of the empty slot the
        host should start a worker in for it (see the module docstring)."""
        busy: list[Worker] = []
        vacant: int | None = None
        for i, worker in enumerate(self.slots):
            if worker is None or worker.phase is Phase.EXITED:
                if vacant is None:
                    vacant = i
            elif worker.inflight == 0 and worker.takes_work:
                return worker
            else:
                busy.append(worker)
        if vacant is not None:
            return vacant
        return min(busy, key=_load)

    def fill(self, slot: int, worker: Worker) -> None:
        self.slots[slot] = worker


async def for_each(step: Callable[[Worker], Awaitable[object]], workers: Sequence[Worker]) -> None:
    """Run ``step`` on every worker at once (a load or a retirement), and
    raise the first error any of them raised, as one worker's call would:
    a caller sees ``WorkerFault``, not an exception group."""
    if len(workers) == 1:
        await step(workers[0])
        return
    errors: list[Exception] = []

    async def one(worker: Worker) -> None:
        try:
            await step(worker)
        except Exception as exc:  # the others still finish; cancellation passes
            errors.append(exc)

    async with anyio.create_task_group() as tg:
        for worker in workers:
            tg.start_soon(one, worker)
    if errors:
        raise errors[0]
