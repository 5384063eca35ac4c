"""The workers that serve one model (its entry's ``workers``), and which takes a call.

A model served by more than one worker sends each new call to one of them,
and that call stays on it for all its requests (its order, its head start
and its no-replay rule are one worker's). The choice, in order:

1. an idle worker that takes work: no call in it, so nothing to wait for;
2. else, for a *small* call (one request's worth, ``cut.is_small``), a busy
   worker that takes work, while the host starts a worker in an empty slot
   for the calls after it: the small call waits behind that worker's
   current request (a bulk call's is up to four budgets joined, tens of
   milliseconds on the CPU lane), where a new worker's start takes about a
   second; later small calls do the same until the new worker is ready;
3. else an empty slot (never started, or its worker exited): the host starts
   a worker there, and the call waits for its hello;
4. else, for a call that is not small, a worker still starting with no call
   in it: the call waits for its hello, as it would in an empty slot;
5. else a busy worker: one that takes work before one that does not, then
   one without a bulk call (whose requests a short call would wait behind)
   before one with, then the one with the fewest calls; a failed worker
   only when every one has failed.

A worker whose start failed keeps its slot, failed (logged, and shown in
snapshots), until the model is loaded again: only a call that waited for
that start sees its error, and no call is sent to it while another serves.
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


def _empty(worker: Worker | None) -> bool:
    """A slot free for a new worker: never started, or its worker exited."""
    return worker is None or worker.phase is Phase.EXITED


def _starting(worker: Worker) -> bool:
    """Not started yet, or starting: ready soon, unless its start fails."""
    return worker.phase in (Phase.NEW, Phase.STARTING) and not worker.retiring


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
        return [w for w in self.slots if w is not None and not _empty(w)]

    def first(self) -> Worker | None:
        """The first slot's worker, or the first live one (what a tool shows)."""
        live = self.live()
        return live[0] if live else self.slots[0]

    def choose(self, small: bool = False) -> Worker | int:
        """The worker a new call (``small``: one request's worth) goes to, or
        the index of the empty slot the host should start a worker in for it
        (see the module docstring). A busy worker chosen while a slot is empty
        is a small call's: the host then starts that slot (:meth:`vacant`)."""
        busy: list[Worker] = []
        starting: Worker | None = None
        for worker in self.live():
            if worker.inflight == 0 and worker.takes_work:
                return worker
            busy.append(worker)
            if starting is None and worker.inflight == 0 and _starting(worker):
                starting = worker
        vacant = self.vacant()
        if vacant is not None:
            serving = [w for w in busy if w.takes_work] if small else []
            return min(serving, key=_load) if serving else vacant
        if starting is not None and not small:
            return starting
        return min(busy, key=_load)

    def vacant(self) -> int | None:
        """The first empty slot (never started, or its worker exited), if any."""
        return next((i for i, worker in enumerate(self.slots) if _empty(worker)), None)

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
