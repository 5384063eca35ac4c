"""The residency supervisor of one lane: its state (:mod:`.state`), the
exits of its workers (:mod:`.exits`), their lifecycle (:mod:`.lifecycle`) and
admission (:mod:`.admission`), and the few methods the host calls to hand it
workers and take them back.
"""

from __future__ import annotations

from .admission import Admission, Lease, LeaseWatch
from .lane import Backlog
from .worker import Phase, Worker

__all__ = ["Backlog", "Lease", "LeaseWatch", "Supervisor"]


class Supervisor(Admission):
    """Supervises the workers of one lane: residency, leases, faults, retirement."""

    def adopt(self, worker: Worker) -> None:
        """Take ``worker`` (new, of this lane) under supervision."""
        self.workers[worker.worker_id] = worker

    def forget(self, worker: Worker) -> None:
        """Drop the record of ``worker``, gone for good: nothing of it is charged
        any more (refunds follow confirmed exits)."""
        assert not self.lane.worker_charges(worker.worker_id), worker.worker_id
        del self.workers[worker.worker_id]

    def close_lane(self) -> None:
        """Close the lane's session once every worker of it has exited."""
        session = self.lane.session
        if session is not None and all(w.phase is Phase.EXITED for w in self.workers.values()):
            session.close()
            self.lane.session = None
