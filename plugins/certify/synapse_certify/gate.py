"""The placement gate: does a recorded stream prove where shapes were placed?

The supervisor, with ``certify_observation`` on, follows every admission with
the worker's own inventory and its admission count (admissions minus
evictions, kept apart from the reservation table). The gate checks, per
worker generation:

- an inventory that could not be read (``shapes is None``) fails: a missing
  inventory is not an empty one;
- an inventory whose number of distinct shapes differs from the admission
  count recorded with it is refused, as is one listing a shape twice;
- an inventory with no admission count after it, or a count with no
  inventory before it, fails: there is nothing to compare;
- an admitted shape with no inventory recorded after it fails (the stream
  was recorded without ``certify_observation`` or was cut short);
- a stream without a single inventory certifies nothing, and fails.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any, Literal

import attrs

from synapse_core.plugin import AdmissionCount, Event, ShapeAdmitted, WorkerInventory

Rule = Literal[
    "inventory-missing",
    "count-mismatch",
    "duplicate-shape",
    "count-absent",
    "inventory-absent",
    "empty-stream",
]

Key = tuple[str, int]


@attrs.frozen
class Problem:
    """One reason the gate does not pass. ``worker_id`` and ``generation`` are
    ``None`` only for a problem with the stream as a whole."""

    rule: Rule
    worker_id: str | None
    generation: int | None
    message: str

    def line(self) -> str:
        where = (
            "stream" if self.worker_id is None else f"{self.worker_id} generation {self.generation}"
        )
        return f"{where}: {self.message} [{self.rule}]"

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


def check(events: Iterable[Event]) -> GateReport:
    """Run the placement gate over ``events`` in recorded order."""
    gate = _Gate()
    for event in events:
        gate.see(event)
    return gate.report()


class _Gate:
    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.events = 0
        self.inventories = 0
        #: the inventory of each generation still waiting for its admission count
        self.awaiting_count: dict[Key, WorkerInventory] = {}
        #: admissions of each generation not yet followed by an inventory
        self.uninventoried: Counter[Key] = Counter()
        self.generations: set[Key] = set()

    def problem(self, rule: Rule, key: Key, message: str) -> None:
        self.problems.append(Problem(rule, key[0], key[1], message))

    def see(self, event: Event) -> None:
        self.events += 1
        key = (event.worker_id, event.generation)
        match event:
            case ShapeAdmitted():
                self.generations.add(key)
                self.uninventoried[key] += 1
            case WorkerInventory():
                self.generations.add(key)
                self.inventory(key, event)
            case AdmissionCount():
                self.count(key, event)

    def inventory(self, key: Key, event: WorkerInventory) -> None:
        self.inventories += 1
        if self.uninventoried[key]:
            self.uninventoried[key] -= 1
        if key in self.awaiting_count:
            self.problem("count-absent", key, "inventory has no admission count recorded after it")
        self.awaiting_count[key] = event
        if event.shapes is None:
            reason = f": {event.reason}" if event.reason else ""
            self.problem("inventory-missing", key, f"inventory is missing (not read{reason})")
            return
        repeated = sorted(
            f"({s.bucket}, {s.batch})" for s, n in Counter(event.shapes).items() if n > 1
        )
        if repeated:
            self.problem("duplicate-shape", key, f"inventory lists {', '.join(repeated)} twice")

    def count(self, key: Key, event: AdmissionCount) -> None:
        inventory = self.awaiting_count.pop(key, None)
        if inventory is None:
            message = f"admission count {event.count} has no inventory before it"
            self.problem("inventory-absent", key, message)
        elif inventory.shapes is not None:
            held = len(set(inventory.shapes))
            if held != event.count:
                message = f"inventory holds {held} shape(s), admission count is {event.count}"
                self.problem("count-mismatch", key, message)

    def report(self) -> GateReport:
        for key in self.awaiting_count:
            self.problem("count-absent", key, "inventory has no admission count recorded after it")
        for key, n in self.uninventoried.items():
            if n:
                message = f"{n} admitted shape(s) have no inventory recorded after them"
                self.problem("inventory-absent", key, message)
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
        generations = len(self.generations)
        return GateReport(tuple(self.problems), self.events, self.inventories, generations)
