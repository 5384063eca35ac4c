"""The placement gate: does a recorded stream prove where shapes were placed?

The gate *replays* the stream. Each worker generation is a small state
machine — started, holding admitted shapes (admissions minus evictions),
exited, refunded — and every event must be a step that machine can take. The
inventories and admission counts the supervisor records with
``certify_observation`` on are then held to the replayed state, not only to
each other, so a stream that contradicts itself cannot pass. Each problem
names the line it was found at.

What the replay refuses (the rule names are in :data:`Rule`):

- events of a generation that never started (a ghost, or a removed
  ``worker_started``), a generation started twice or out of order, or started
  while an earlier generation of its worker had not confirmed its exit;
- a shape admitted while the generation already holds it, anything but a
  missing inventory recorded after the generation exited;
- a refund of a shape the generation does not hold while it runs (a refund
  before its admission), a refund whose units differ from the admission's, a
  refund while the exit is unconfirmed, a second refund after the exit;
- an inventory that could not be read (``shapes is None``: missing is not
  empty), one listing a shape twice, one that differs from the replayed
  shapes, one no admission asked for;
- an admission count that differs from its inventory or from the replayed
  admissions minus evictions, a count with no inventory before it, an
  inventory with no count after it;
- at the end: an admission with no inventory after it, a generation that
  never exited or whose exit was never confirmed, a confirmed exit whose
  held shapes were not all refunded, and a stream without a single inventory.

A stream is one host's run from its start: appending a second run to the
same file starts its workers' generations again, which the gate refuses.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any, Literal

import attrs

from synapse_core import events as ev
from synapse_core.events import Shape

Rule = Literal[
    "inventory-missing",
    "count-mismatch",
    "duplicate-shape",
    "count-absent",
    "inventory-absent",
    "inventory-disagrees",
    "unexpected-inventory",
    "not-started",
    "duplicate-start",
    "restart-before-exit",
    "worker-mismatch",
    "readmitted",
    "after-exit",
    "duplicate-fault",
    "duplicate-exit",
    "refund-unadmitted",
    "refund-unconfirmed",
    "units-mismatch",
    "refund-missing",
    "not-exited",
    "exit-unconfirmed",
    "empty-stream",
]

Key = tuple[str, int]
Numbered = tuple[int, ev.Event]


@attrs.frozen
class Problem:
    """One reason the gate does not pass. ``worker_id`` and ``generation`` are
    ``None`` only for a problem with the stream as a whole; ``at`` is the
    stream line it was found at (``None`` for what is missing at the end)."""

    rule: Rule
    worker_id: str | None
    generation: int | None
    message: str
    at: int | None = None

    def line(self) -> str:
        where = (
            "stream" if self.worker_id is None else f"{self.worker_id} generation {self.generation}"
        )
        prefix = "end of stream" if self.at is None else f"line {self.at}"
        return f"{prefix}: {where}: {self.message} [{self.rule}]"

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class GateReport:
    problems: tuple[Problem, ...]
    events: int
    inventories: int
    generations: int

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        verdict = "passed" if self.ok else f"failed with {len(self.problems)} problem(s)"
        return (
            f"placement gate {verdict}: {self.events} events, {self.inventories} inventories "
            f"of {self.generations} worker generation(s)"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "events": self.events,
            "inventories": self.inventories,
            "generations": self.generations,
            "problems": [p.to_dict() for p in self.problems],
        }


def check(events: Iterable[ev.Event]) -> GateReport:
    """Run the placement gate over ``events`` in recorded order (line = position)."""
    return replay(enumerate(events, start=1))


def replay(numbered: Iterable[Numbered]) -> GateReport:
    """Run the placement gate over ``(line, event)`` pairs in recorded order."""
    gate = _Replay()
    for at, event in numbered:
        gate.see(at, event)
    return gate.report()


def _shape(shape: Shape) -> str:
    return f"({shape.bucket}, {shape.batch})"


def _shapes(shapes: Iterable[Shape]) -> str:
    return ", ".join(_shape(s) for s in sorted(shapes, key=lambda s: (s.bucket, s.batch)))


@attrs.define
class _Admission:
    units: int
    at: int


@attrs.define
class _Generation:
    """The replayed state of one worker generation."""

    lane: str
    model: str
    started_at: int
    #: shapes admitted and not evicted, with their units and admission line
    held: dict[Shape, _Admission] = attrs.field(factory=dict)
    #: admissions minus evictions, as the supervisor's admission count keeps it
    count: int = 0
    #: admissions still waiting for their inventory
    uninventoried: int = 0
    awaiting_count: ev.WorkerInventory | None = None
    faulted: bool = False
    #: None while running; then whether the (last) exit event confirmed it
    confirmed: bool | None = None
    refunded_after_exit: set[Shape] = attrs.field(factory=set)

    @property
    def exited(self) -> bool:
        return self.confirmed is not None


class _Replay:
    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.events = 0
        self.inventories = 0
        self.generations: dict[Key, _Generation] = {}
        #: each worker's generations in start order
        self.workers: dict[str, list[int]] = {}
        self.ghosts: set[Key] = set()

    def problem(self, rule: Rule, key: Key, message: str, at: int | None) -> None:
        self.problems.append(Problem(rule, key[0], key[1], message, at))

    def see(self, at: int, event: ev.Event) -> None:
        self.events += 1
        key = (event.worker_id, event.generation)
        if isinstance(event, ev.WorkerInventory):
            self.inventories += 1
        if isinstance(event, ev.WorkerStarted):
            self.start(at, key, event)
            return
        gen = self.generations.get(key)
        if gen is None:
            if key not in self.ghosts:
                self.ghosts.add(key)
                kind = event.__struct_config__.tag
                self.problem("not-started", key, f"{kind} for a generation that never started", at)
            return
        if event.lane != gen.lane:
            message = f"{event.__struct_config__.tag} names lane {event.lane}, not {gen.lane}"
            self.problem("worker-mismatch", key, message, at)
        match event:
            case ev.ShapeAdmitted():
                self.admitted(at, key, gen, event)
            case ev.ShapeRefunded():
                self.refunded(at, key, gen, event)
            case ev.WorkerInventory():
                self.inventory(at, key, gen, event)
            case ev.AdmissionCount():
                self.admission_count(at, key, gen, event)
            case ev.WorkerFaulted():
                if gen.exited:
                    self.problem("after-exit", key, "faulted after its exit", at)
                elif gen.faulted:
                    self.problem("duplicate-fault", key, "faulted a second time", at)
                gen.faulted = True
            case ev.WorkerExited():
                self.exited(at, key, gen, event)

    # -- generations -------------------------------------------------------------------

    def start(self, at: int, key: Key, event: ev.WorkerStarted) -> None:
        if key in self.generations:
            since = self.generations[key].started_at
            self.problem("duplicate-start", key, f"started again (first at line {since})", at)
            return
        earlier = self.workers.setdefault(event.worker_id, [])
        if earlier:
            last = self.generations[(event.worker_id, earlier[-1])]
            if event.generation < earlier[-1]:
                message = f"started after generation {earlier[-1]}; generations only grow"
                self.problem("duplicate-start", key, message, at)
            elif not last.confirmed:
                message = (
                    f"started while generation {earlier[-1]} had not confirmed its exit; "
                    "a worker runs one generation at a time"
                )
                self.problem("restart-before-exit", key, message, at)
            if (event.lane, event.model) != (last.lane, last.model):
                message = (
                    f"runs {event.model!r} on {event.lane}, its earlier generation ran "
                    f"{last.model!r} on {last.lane}"
                )
                self.problem("worker-mismatch", key, message, at)
        earlier.append(event.generation)
        self.generations[key] = _Generation(event.lane, event.model, at)

    def exited(self, at: int, key: Key, gen: _Generation, event: ev.WorkerExited) -> None:
        if gen.confirmed:
            self.problem("duplicate-exit", key, "exited again after a confirmed exit", at)
            return
        gen.confirmed = event.confirmed  # an unconfirmed exit may be confirmed later

    # -- reservations ------------------------------------------------------------------

    def admitted(self, at: int, key: Key, gen: _Generation, event: ev.ShapeAdmitted) -> None:
        shape = _shape(event.shape)
        if gen.exited:
            self.problem("after-exit", key, f"{shape} admitted after its exit", at)
            return
        held = gen.held.get(event.shape)
        if held is not None:
            message = f"{shape} admitted again while held since line {held.at}"
            self.problem("readmitted", key, message, at)
            return
        gen.held[event.shape] = _Admission(event.units, at)
        gen.count += 1
        gen.uninventoried += 1

    def refunded(self, at: int, key: Key, gen: _Generation, event: ev.ShapeRefunded) -> None:
        shape = _shape(event.shape)
        if gen.confirmed is False:
            message = f"{shape} refunded although the exit was not confirmed"
            self.problem("refund-unconfirmed", key, message, at)
            return
        held = gen.held.get(event.shape)
        if gen.exited:
            # After a confirmed exit every charge is refunded once, including
            # one whose admission never completed (so was never admitted).
            if event.shape in gen.refunded_after_exit:
                self.problem("refund-unadmitted", key, f"{shape} refunded twice", at)
                return
            gen.refunded_after_exit.add(event.shape)
        elif held is None:
            message = f"{shape} refunded while running, but it holds no such admission"
            self.problem("refund-unadmitted", key, message, at)
            return
        else:  # an eviction
            del gen.held[event.shape]
            gen.count -= 1
        if held is not None and held.units != event.units:
            message = (
                f"{shape} refunded {event.units} units, its admission at line {held.at} "
                f"charged {held.units}"
            )
            self.problem("units-mismatch", key, message, at)

    # -- certification ---------------------------------------------------------------------

    def inventory(self, at: int, key: Key, gen: _Generation, event: ev.WorkerInventory) -> None:
        if gen.awaiting_count is not None:
            message = "inventory has no admission count recorded after it"
            self.problem("count-absent", key, message, at)
        gen.awaiting_count = event
        if gen.uninventoried:
            gen.uninventoried -= 1
        else:
            message = "inventory recorded with no admission before it that asked for one"
            self.problem("unexpected-inventory", key, message, at)
        if event.shapes is None:
            reason = f": {event.reason}" if event.reason else ""
            self.problem("inventory-missing", key, f"inventory is missing (not read{reason})", at)
            return
        if gen.exited:
            self.problem("after-exit", key, "inventory read after its exit", at)
        repeated = [s for s, n in Counter(event.shapes).items() if n > 1]
        if repeated:
            message = f"inventory lists {_shapes(repeated)} twice"
            self.problem("duplicate-shape", key, message, at)
        listed = set(event.shapes)
        extra, lacking = listed - gen.held.keys(), gen.held.keys() - listed
        if extra or lacking:
            parts = []
            if extra:
                parts.append(f"lists {_shapes(extra)}, never admitted or since evicted")
            if lacking:
                since = ", ".join(
                    f"{_shape(s)} (line {gen.held[s].at})"
                    for s in sorted(lacking, key=lambda s: (s.bucket, s.batch))
                )
                parts.append(f"lacks {since}, admitted")
            self.problem("inventory-disagrees", key, "inventory " + "; ".join(parts), at)

    def admission_count(
        self, at: int, key: Key, gen: _Generation, event: ev.AdmissionCount
    ) -> None:
        inventory, gen.awaiting_count = gen.awaiting_count, None
        if inventory is None:
            message = f"admission count {event.count} has no inventory before it"
            self.problem("inventory-absent", key, message, at)
            return
        parts = []
        if inventory.shapes is not None:
            held = len(set(inventory.shapes))
            if held != event.count:
                parts.append(f"inventory holds {held} shape(s), admission count is {event.count}")
        if gen.count != event.count:
            parts.append(
                f"admission count {event.count} differs from the {gen.count} the stream's "
                "admissions minus evictions give"
            )
        if parts:
            self.problem("count-mismatch", key, "; ".join(parts), at)

    # -- the end ---------------------------------------------------------------------------

    def report(self) -> GateReport:
        for key, gen in self.generations.items():
            self.finish(key, gen)
        if not self.inventories:
            self.problems.append(
                Problem(
                    "empty-stream",
                    None,
                    None,
                    "the stream holds no worker inventory, so it certifies nothing; "
                    "record it with certify_observation = true",
                )
            )
        return GateReport(
            tuple(self.problems), self.events, self.inventories, len(self.generations)
        )

    def finish(self, key: Key, gen: _Generation) -> None:
        if gen.awaiting_count is not None:
            message = "inventory has no admission count recorded after it"
            self.problem("count-absent", key, message, None)
        if gen.uninventoried:
            message = f"{gen.uninventoried} admitted shape(s) have no inventory recorded after them"
            self.problem("inventory-absent", key, message, None)
        if gen.confirmed is None:
            message = "never exited: the stream was cut short, or lost its worker_exited"
            self.problem("not-exited", key, message, None)
        elif not gen.confirmed:
            message = "exit never confirmed: its reservations were still charged at the end"
            self.problem("exit-unconfirmed", key, message, None)
        else:
            unrefunded = gen.held.keys() - gen.refunded_after_exit
            if unrefunded:
                message = f"exited, but {_shapes(unrefunded)} never refunded"
                self.problem("refund-missing", key, message, None)
