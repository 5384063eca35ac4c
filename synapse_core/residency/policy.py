"""Residency policy types: what the policy hooks see and may answer."""

from __future__ import annotations

import attrs

from ..config import ModelSpec
from ..wire import Shape


@attrs.frozen
class Reservation:
    worker_id: str
    generation: int
    shape: Shape
    units: int
    #: held by a lease, or its admission or eviction is under way
    leased: bool
    #: can be evicted now: unleased, admitted, and its worker is ready
    evictable: bool = False
    #: the host clock when it was last leased (or admitted)
    last_used: float = 0.0


@attrs.frozen
class LaneView:
    """A read-only picture of a lane at the moment of a decision."""

    lane_id: str
    capacity: int
    reserved: int
    reservations: tuple[Reservation, ...]

    @property
    def free(self) -> int:
        return self.capacity - self.reserved


@attrs.frozen
class AdmissionRequest:
    """A worker wants a shape admitted on a lane."""

    lane_id: str
    worker_id: str
    generation: int
    model: ModelSpec
    shape: Shape
    units: int


@attrs.frozen
class Wait:
    """Wait for capacity to be refunded, within the call's deadline."""


@attrs.frozen
class Evict:
    """Evict an unleased shape (named by one of ``LaneView.reservations``)."""

    worker_id: str
    shape: Shape


@attrs.frozen
class Refuse:
    """Refuse the admission now with ``reason``."""

    reason: str


Decision = Wait | Evict | Refuse
