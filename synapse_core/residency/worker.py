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


@attrs.define(eq=False)
class Worker:
    worker_id: str
    spec: ModelSpec
    transport: Transport
    tokenizer: Tokenizer
    lane: Lane
    generation: int = 0
    phase: Phase = Phase.NEW
    retiring: bool = False
    reason: str = ""
    channel: FramedChannel | None = None
    process: WorkerProcess | None = None
    hello: Hello | None = None
    #: shapes admitted by the current generation -> reserved units
    shapes: dict[Shape, int] = attrs.field(factory=dict)
    #: shapes whose admission or eviction exchange is under way
    busy_shapes: dict[Shape, anyio.Event] = attrs.field(factory=dict)
    leases: Counter[Shape] = attrs.field(factory=Counter)
    inflight: int = 0
    restarts: list[float] = attrs.field(factory=list)
    restart_count: int = 0
    #: a fault was seen while retiring: no point waiting for a polite exit
    unhealthy: bool = False
    #: why the last first start failed, when its type matters to callers
    start_error: Exception | None = None
    #: admissions minus evictions of this generation, kept apart from the
    #: reservation table for certification
    admission_count: int = 0
    #: a process of this worker whose exit could not be confirmed, still watched
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

    def enter(self) -> None:
        """Take the catalog guard: retirement waits for this call to leave."""
        self.inflight += 1

    def leave(self) -> None:
        self.inflight -= 1
        if self.inflight == 0:
            self.notify()
