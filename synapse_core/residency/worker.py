"""One worker's residency state: generation, admitted shapes, leases, phase."""

from __future__ import annotations

from collections import Counter
from enum import StrEnum

import anyio
import attrs

from ..channel import FramedChannel
from ..config import ModelSpec
from ..tokenizer import Tokenizer
from ..transport import Transport, WorkerProcess
from ..wire import Hello, Shape
from .lane import Lane
from .signal import Signal


class Phase(StrEnum):
    NEW = "new"  # not launched yet (workers start lazily)
    STARTING = "starting"
    READY = "ready"
    RECOVERING = "recovering"
    EXITED = "exited"
    EXIT_UNCONFIRMED = "exit_unconfirmed"
    FAILED = "failed"


@attrs.frozen(eq=False)
class Guard:
    """A call's hold on a worker's catalog guard, as the call entered:
    counted in ``Worker.inflight`` (and ``small_inflight`` if ``small``)
    until the call leaves; ``call.py`` lets go of it. Made at each entry
    (about 0.3 µs): a worker that kept its two guards would hold itself in
    a reference cycle, and a replaced worker's record (its channel, its
    process) would wait for the cycle collector."""

    worker: Worker = attrs.field(repr=False)
    #: entered as a small call (``cut.is_small``)
    small: bool


@attrs.define(eq=False)
class Worker:
    """One model's worker on its lane: what its current generation runs and holds.

    Only this class's methods change its fields (``tests/test_residency_structure.py``
    keeps it so); the supervisor's collaborators call them.
    """

    worker_id: str
    spec: ModelSpec
    transport: Transport
    tokenizer: Tokenizer
    lane: Lane
    # Invariant: only grows, by one per connected launch (``connected``);
    #   ``channel``, ``process`` and ``hello`` belong to that generation.
    generation: int = 0
    # Invariant: READY iff the current generation said hello and no fault of it
    #   has been reported; STARTING and RECOVERING always settle (to READY,
    #   FAILED, EXITED or EXIT_UNCONFIRMED), also on cancellation (``settle``).
    # Invariant: at most one recovery runs per generation: ``fault`` starts one
    #   only from READY, for the current generation.
    # Invariant: an EXITED worker holds no reservation on its lane.
    phase: Phase = Phase.NEW
    # Invariant: once set it stays set; no new lease is granted and no
    #   replacement generation connects.
    retiring: bool = False
    reason: str = ""
    channel: FramedChannel | None = None
    process: WorkerProcess | None = None
    hello: Hello | None = None
    #: shapes admitted by the current generation -> reserved units
    # Invariant: a shape is charged on the lane before its admission exchange
    #   starts, and is here only once the worker admitted it.
    shapes: dict[Shape, int] = attrs.field(factory=dict)
    #: shapes whose admission or eviction exchange is under way
    # Invariant: while such an exchange is under way its shape is here and
    #   nothing else admits, evicts or leases it.
    busy_shapes: dict[Shape, anyio.Event] = attrs.field(factory=dict)
    # Invariant: counts the unreleased leases of the current generation; a
    #   leased or busy shape is never evictable. A lease is granted only while
    #   ``takes_work`` and the current generation admitted the shape.
    leases: Counter[Shape] = attrs.field(factory=Counter)
    #: calls holding the catalog guard; retirement waits until none does
    inflight: int = 0
    #: of those, the small calls: one input, or inputs whose sequence lengths
    #: fit one request's budget (``cut.is_small``)
    # Invariant: 0 <= small_inflight <= inflight.
    small_inflight: int = 0
    #: a small call and another call have been in the worker together since it
    #: was last idle: each call's requests keep to the model's budget (see
    #: ``cut.join_next``); bulk calls beside bulk calls alone do not
    # Invariant: false whenever ``inflight`` is 0; set by ``enter`` when a call
    #   enters beside another and one of them is small, cleared by ``leave``
    #   when the last one leaves.
    shared: bool = False
    restarts: list[float] = attrs.field(factory=list)
    restart_count: int = 0
    #: a fault was seen while retiring: no point waiting for a polite exit
    unhealthy: bool = False
    #: why the last first start failed, when its type matters to callers
    start_error: Exception | None = None
    #: when a first start that failed may be tried again (the host's clock):
    #: a call before then gets the failure's reason, and starts nothing
    retry_at: float = 0.0
    #: admissions minus evictions of this generation, kept apart from the
    #: reservation table for certification
    admission_count: int = 0
    #: a process of this worker whose exit could not be confirmed, still watched
    # Invariant: what this process holds stays charged while it is set: a
    #   reservation is refunded only once the exit of the process that held it
    #   is confirmed (then ``gone``), and the worker is not EXITED meanwhile.
    lingering: WorkerProcess | None = None
    _changed: Signal = attrs.field(factory=Signal)

    @property
    def state(self) -> str:
        """The state a snapshot reports."""
        if self.phase in (Phase.EXITED, Phase.EXIT_UNCONFIRMED, Phase.FAILED):
            return self.phase.value
        if self.retiring:
            return "retiring"
        if self.phase is Phase.NEW:
            return Phase.STARTING.value
        return self.phase.value

    @property
    def takes_work(self) -> bool:
        """Ready and not retiring: new calls may start on it without waiting."""
        return self.phase is Phase.READY and not self.retiring

    @property
    def buckets(self) -> list[int]:
        return list(self.hello.buckets) if self.hello else []

    @property
    def ceiling(self) -> int:
        """Longest sequence served: the catalog ceiling, capped by the largest bucket."""
        buckets = self.hello.buckets if self.hello else None
        return min(self.spec.ceiling, buckets[-1]) if buckets else self.spec.ceiling

    def is_retiring(self) -> bool:
        """``retiring``, read after an await (a call, so type checkers do not narrow it)."""
        return self.retiring

    def notify(self) -> None:
        self._changed.notify()

    async def changed(self) -> None:
        await self._changed.wait()

    def enter(self, small: bool) -> Guard:
        """Take the catalog guard: retirement waits for this call to leave
        (``leave`` with the guard returned). ``small``: a small call (``cut.is_small``)."""
        self.inflight += 1
        self.small_inflight += small
        # Sticky until idle: a client sending short calls one after another
        # leaves the worker between two of them, and a bulk call joining its
        # requests in that gap would make the next short call wait for all of one.
        self.shared = self.shared or (self.inflight > 1 and self.small_inflight > 0)
        return Guard(self, small)

    def leave(self, guard: Guard) -> None:
        """Let go of the catalog guard ``enter`` returned: counted as it entered."""
        assert guard.worker is self, "a guard is let go of on the worker that gave it"
        self.inflight -= 1
        self.small_inflight -= guard.small
        if self.inflight == 0:
            self.shared = False
            self.notify()

    # -- lifecycle: start, connect, fault, settle, retire ---------------------------

    def booting(self) -> None:
        """A first start is under way (a new call starts a failed one again)."""
        self.phase = Phase.STARTING
        self.start_error = None

    def connected(
        self, generation: int, channel: FramedChannel, process: WorkerProcess, hello: Hello
    ) -> None:
        """``generation`` said hello: it is ready, with nothing admitted or leased."""
        assert generation > self.generation, (self.worker_id, generation, self.generation)
        self.generation = generation
        self.channel = channel
        self.process = process
        self.hello = hello
        self.shapes.clear()
        self.leases.clear()
        self.admission_count = 0
        self.phase = Phase.READY
        self.reason = ""

    def fault(self, generation: int, reason: str) -> bool:
        """A fault of ``generation`` was seen; True when it starts a recovery
        (the current generation was ready and is now RECOVERING)."""
        if self.retiring:
            self.unhealthy = True  # retirement stops it, without waiting politely
            return False
        if generation != self.generation:
            return False  # stale: that generation is already gone
        if self.phase is not Phase.READY:
            return False  # this generation is already recovering (or stopping)
        self.phase = Phase.RECOVERING
        self.reason = reason
        return True

    def explain(self, generation: int, reason: str) -> None:
        """A better reason for the fault of ``generation`` (its exit status)."""
        if generation == self.generation and self.phase is Phase.RECOVERING:
            self.reason = reason

    def resumes_recovery(self) -> None:
        """A recovery that stopped at an unconfirmed exit carries on."""
        self.phase = Phase.RECOVERING

    def fail(self, reason: str, error: Exception | None = None) -> None:
        """It cannot run: a start or a replacement failed, or its budget is spent."""
        self.phase = Phase.FAILED
        self.reason = reason
        if error is not None:
            self.start_error = error

    def start_failed(self, reason: str, now: float, backoff_s: float) -> None:
        """A first start failed at ``now``: it counts toward the restart
        budget (``restarts``), and no new start is tried for ``backoff_s``."""
        self.fail(reason)
        self.restarts.append(now)
        self.retry_at = now + backoff_s

    def unconfirmed(self, reason: str) -> None:
        """A process of it did not exit in time: nothing of it is refunded yet."""
        self.phase = Phase.EXIT_UNCONFIRMED
        self.reason = reason

    def settle(self, transient: Phase, reason: str) -> None:
        """Leave ``transient`` (STARTING or RECOVERING) if still in it, also on
        cancellation, so nothing waits on a phase that no task will end."""
        if self.phase is transient:
            self.phase = Phase.FAILED
            self.reason = self.reason or reason
        if self.retiring and self.phase is Phase.FAILED:
            self.phase = Phase.EXITED  # nothing of it runs: retirement is complete
        self.notify()

    def retire(self) -> None:
        """Take no new work from now on."""
        self.retiring = True

    def exited(self) -> None:
        """Its process is gone (or never ran) and it takes no work again."""
        self.phase = Phase.EXITED

    def prune_restarts(self, now: float, window_s: float) -> int:
        """Forget restarts older than ``window_s``; the number left."""
        self.restarts = [t for t in self.restarts if now - t < window_s]
        return len(self.restarts)

    def restarted(self, now: float) -> None:
        self.restarts.append(now)
        self.restart_count += 1

    # -- exits ---------------------------------------------------------------------

    def gone(self) -> None:
        """Its process is confirmed gone and its reservations refunded."""
        self.shapes.clear()
        self.channel = None
        self.process = None

    def linger(self, process: WorkerProcess) -> None:
        """Keep ``process``, whose exit could not be confirmed, under watch."""
        self.lingering = process

    def stop_lingering(self, process: WorkerProcess) -> bool:
        """``process`` is gone at last; False if it is no longer the one watched."""
        if self.lingering is not process:
            return False
        self.lingering = None
        return True

    # -- admission and leases --------------------------------------------------------

    def admitting(self, shape: Shape) -> anyio.Event:
        """An admission exchange for ``shape`` (already charged) begins; the event
        is set once it ends (:meth:`exchanged`)."""
        self.busy_shapes[shape] = done = anyio.Event()
        return done

    def admitted(self, shape: Shape, units: int) -> None:
        self.shapes[shape] = units
        self.admission_count += 1

    def evicting(self, shape: Shape) -> anyio.Event:
        """An eviction exchange for ``shape`` begins: it is no longer admitted."""
        del self.shapes[shape]
        self.busy_shapes[shape] = done = anyio.Event()
        return done

    def evicted(self) -> None:
        self.admission_count -= 1

    def exchanged(self, shape: Shape) -> None:
        """The admission or eviction exchange for ``shape`` ended, either way."""
        self.busy_shapes.pop(shape).set()

    def lease(self, shape: Shape) -> None:
        self.leases[shape] += 1

    def unlease(self, generation: int, shape: Shape) -> None:
        """A lease of ``generation`` is released (one of an older generation
        was already forgotten when the current one connected)."""
        if generation == self.generation and self.leases[shape] > 0:
            self.leases[shape] -= 1
