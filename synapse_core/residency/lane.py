"""A device lane's reservation table: capacity charged per (worker, shape)."""

from __future__ import annotations

import attrs

from ..errors import CapacityError
from ..transport import LaneInfo, LaneSession
from ..wire import Shape
from .policy import LaneView, Reservation
from .signal import Signal


@attrs.define(eq=False)
class Charge:
    generation: int
    units: int
    last_used: float = 0.0


@attrs.define(eq=False)
class Backlog:
    """Calls waiting for a permit or for lane capacity, host-wide."""

    waiting: int = 0


@attrs.define(eq=False)
class Lane:
    """A device lane's reservation table. Only its own methods change it
    (``tests/test_residency_structure.py`` keeps it so)."""

    info: LaneInfo
    capacity: int
    # Invariant: the sum of ``charges``' units, never over ``capacity``
    #   (``charge`` refuses, as ``CapacityError``).
    reserved: int = 0
    # Invariant: a charge is refunded only on its worker's word (an eviction or
    #   a refused admission) or once the exit of the process that held it is
    #   confirmed; a shape is charged before its admission exchange starts.
    charges: dict[tuple[str, Shape], Charge] = attrs.field(factory=dict)
    #: the lane's hardware lock, for transports whose lanes have one
    session: LaneSession | None = None
    _changed: Signal = attrs.field(factory=Signal)

    @property
    def lane_id(self) -> str:
        return self.info.lane_id

    @property
    def free(self) -> int:
        return self.capacity - self.reserved

    def touch(self, worker_id: str, shape: Shape, now: float) -> None:
        charge = self.charges.get((worker_id, shape))
        if charge is not None:
            charge.last_used = now

    def charge(self, worker_id: str, generation: int, shape: Shape, units: int) -> None:
        key = (worker_id, shape)
        if key in self.charges:
            raise CapacityError(f"{worker_id} already holds a reservation for {shape}")
        if units > self.free:
            raise CapacityError(f"charging {units} units would exceed lane {self.lane_id}")
        self.charges[key] = Charge(generation, units)
        self.reserved += units

    def refund(self, worker_id: str, shape: Shape) -> int:
        charge = self.charges.pop((worker_id, shape))
        self.reserved -= charge.units
        self.notify()
        return charge.units

    def opened(self, session: LaneSession | None) -> None:
        """The lane was opened: ``session`` holds its hardware lock (if any)."""
        self.session = session

    def close_session(self) -> None:
        """Let the hardware lock go (every worker of the lane has exited)."""
        if self.session is not None:
            self.session.close()
            self.session = None

    def holds(self, worker_id: str, shape: Shape) -> bool:
        return (worker_id, shape) in self.charges

    def worker_charges(self, worker_id: str) -> list[tuple[Shape, Charge]]:
        return [(shape, c) for (wid, shape), c in self.charges.items() if wid == worker_id]

    def notify(self) -> None:
        """Wake everything waiting for this lane to change."""
        self._changed.notify()

    async def changed(self) -> None:
        await self._changed.wait()

    def view(self, leased: set[tuple[str, Shape]], evictable: set[tuple[str, Shape]]) -> LaneView:
        return LaneView(
            lane_id=self.lane_id,
            capacity=self.capacity,
            reserved=self.reserved,
            reservations=tuple(
                Reservation(
                    wid,
                    c.generation,
                    shape,
                    c.units,
                    (wid, shape) in leased,
                    (wid, shape) in evictable,
                    c.last_used,
                )
                for (wid, shape), c in self.charges.items()
            ),
        )
