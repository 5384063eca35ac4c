"""Events the supervisor reports to observation sinks (``synapse_observe``).

They are tagged msgspec Structs so a recorder can write them as JSON lines
and a validator can read them back with one typed decoder. Unknown fields are
refused when decoding: a certification must not rest on fields it ignored.

``WorkerInventory`` and ``AdmissionCount`` are emitted only when the host runs
with ``certify_observation = true``; the others whenever a sink is registered.
With no sink and certification off, the supervisor builds no event at all.
"""

from __future__ import annotations

import msgspec

from .wire import Shape


class Event(msgspec.Struct, tag_field="event", frozen=True, forbid_unknown_fields=True):
    lane: str
    worker_id: str
    generation: int


class WorkerStarted(Event, tag="worker_started", frozen=True):
    model: str
    pid: int | None


class ShapeAdmitted(Event, tag="shape_admitted", frozen=True):
    shape: Shape
    units: int
    cold: bool


class ShapeRefunded(Event, tag="shape_refunded", frozen=True):
    shape: Shape
    units: int


class WorkerFaulted(Event, tag="worker_faulted", frozen=True):
    reason: str


class WorkerExited(Event, tag="worker_exited", frozen=True):
    confirmed: bool


class WorkerInventory(Event, tag="worker_inventory", frozen=True):
    """The shapes a worker reports it holds. ``shapes is None`` means the
    inventory could not be read: *missing*, which is not the same as empty."""

    shapes: list[Shape] | None
    reason: str = ""


class AdmissionCount(Event, tag="admission_count", frozen=True):
    """Admissions granted to this worker generation, minus its evictions,
    counted apart from the reservation table so the two can be compared."""

    count: int


AnyEvent = (
    WorkerStarted
    | ShapeAdmitted
    | ShapeRefunded
    | WorkerFaulted
    | WorkerExited
    | WorkerInventory
    | AdmissionCount
)
