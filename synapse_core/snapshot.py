"""Plain, serialisable pictures of the host's residency state."""

from __future__ import annotations

import attrs
import msgspec

from .residency.supervisor import Supervisor
from .residency.worker import Phase, Worker


@attrs.frozen
class ShapeSnapshot:
    bucket: int
    batch: int
    units: int


@attrs.frozen
class WorkerSnapshot:
    worker_id: str
    model: str
    package: str
    generation: int
    state: str
    shapes: list[ShapeSnapshot]
    leases: int
    inflight: int
    pid: int | None
    restarts: int = 0
    reason: str = ""


@attrs.frozen
class LaneSnapshot:
    lane_id: str
    capacity: int
    reserved: int
    workers: list[WorkerSnapshot]


@attrs.frozen
class HostSnapshot:
    lanes: dict[str, LaneSnapshot]
    admissions: int

    def worker(self, model: str) -> WorkerSnapshot:
        """The newest worker serving ``model`` (raises ``KeyError`` if none)."""
        found = [w for lane in self.lanes.values() for w in lane.workers if w.model == model]
        if not found:
            raise KeyError(model)
        return found[-1]

    def to_json(self) -> bytes:
        return msgspec.json.encode(self)


def worker_snapshot(worker: Worker) -> WorkerSnapshot:
    charges = worker.lane.worker_charges(worker.worker_id)
    process = worker.process
    return WorkerSnapshot(
        worker_id=worker.worker_id,
        model=worker.spec.name,
        package=worker.spec.package,
        generation=worker.generation,
        state=worker.state,
        shapes=[ShapeSnapshot(s.bucket, s.batch, c.units) for s, c in charges],
        leases=sum(worker.leases.values()),
        inflight=worker.inflight,
        pid=process.pid if process is not None and worker.phase is not Phase.EXITED else None,
        restarts=worker.restart_count,
        reason=worker.reason,
    )


def take(supervisors: dict[str, Supervisor]) -> HostSnapshot:
    lanes = {
        lane_id: LaneSnapshot(
            lane_id,
            sup.lane.capacity,
            sup.lane.reserved,
            [worker_snapshot(w) for w in sup.workers.values()],
        )
        for lane_id, sup in supervisors.items()
    }
    return HostSnapshot(lanes, sum(sup.admissions for sup in supervisors.values()))
