"""The residency invariants that can be checked from outside at a quiet moment
(every task blocked): the ones written at the :class:`~.lane.Lane` and
:class:`~.worker.Worker` fields, as far as their state shows them.

Tests call :meth:`ResidencyCheck.violations` after every step; it remembers
what it saw so that "only grows" and "stays set" can be checked too.
"""

from __future__ import annotations

from collections.abc import Iterable

from .supervisor import Supervisor
from .worker import Phase, Worker


class ResidencyCheck:
    """Checks the supervisors of one host, step after step."""

    def __init__(self) -> None:
        #: worker id -> (generation, retiring) at the last check
        self._seen: dict[str, tuple[int, bool]] = {}

    def violations(self, supervisors: Iterable[Supervisor]) -> list[str]:
        """What breaks an invariant now, one line each (empty when all hold)."""
        found: list[str] = []
        for sup in supervisors:
            lane = sup.lane
            total = sum(c.units for c in lane.charges.values())
            if lane.reserved != total or not 0 <= lane.reserved <= lane.capacity:
                found.append(
                    f"lane {lane.lane_id}: reserved {lane.reserved}, charges add up to "
                    f"{total}, capacity {lane.capacity}"
                )
            for worker in sup.workers.values():
                found.extend(f"{worker.worker_id}: {v}" for v in self._worker(sup, worker))
        return found

    def _worker(self, sup: Supervisor, w: Worker) -> list[str]:
        lane = sup.lane
        found = []
        if w.lane is not lane:
            found.append("supervised by another lane's supervisor")
        generation, retiring = self._seen.get(w.worker_id, (0, False))
        if w.generation < generation:
            found.append(f"generation went back from {generation} to {w.generation}")
        if retiring and not w.retiring:
            found.append("retiring was set and is no longer")
        self._seen[w.worker_id] = (w.generation, w.retiring)
        if w.phase is Phase.EXITED and lane.worker_charges(w.worker_id):
            found.append("exited but still charged")
        if w.lingering is not None and w.phase is Phase.EXITED:
            found.append("exited while its unconfirmed process is still watched")
        if w.phase is Phase.READY and (w.hello is None or w.channel is None or not w.generation):
            found.append("ready without a connected generation")
        for shape, units in w.shapes.items():
            charge = lane.charges.get((w.worker_id, shape))
            if charge is None or charge.units != units:
                found.append(f"{shape} admitted with {units} units, charged {charge}")
        if both := set(w.shapes) & set(w.busy_shapes):
            found.append(f"admitted and busy at once: {sorted(map(str, both))}")
        if any(n < 0 for n in w.leases.values()) or w.inflight < 0:
            found.append(f"negative count: leases {dict(w.leases)}, inflight {w.inflight}")
        if not 0 <= w.small_inflight <= w.inflight:
            found.append(f"{w.small_inflight} small calls in flight of {w.inflight}")
        if w.shared and not w.inflight:
            found.append("shared while no call is in flight")
        return found
