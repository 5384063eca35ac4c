"""The residency supervisor of one lane, composed of collaborators that each
do one job and see only what they need:

- the :class:`~.lane.Lane` (the reservation table) and the ``workers`` it
  supervises (:class:`~.worker.Worker` records), which change only through
  their own methods;
- :class:`~.exits.Exits`: stop a process, confirm its exit, refund after it;
- :class:`~.lifecycle.Lifecycle`: boot, watch, recover and retire workers;
- :class:`~.admission.Admission`: admit and evict shapes, grant and release
  leases, run exchanges under them.

The :class:`Supervisor` owns them and is all the host and the serving path
see: it hands each call to the collaborator whose job it is.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from anyio.abc import TaskGroup

from ..channel import Exchange
from ..config import HostConfig
from ..deadline import Clock, Deadline
from ..errors import SynapseError
from ..plugins import PluginHost
from ..wire import Frame, Infer, Shape
from .admission import Admission, Lease, LeaseWatch
from .context import Context
from .exits import Exits
from .lane import Backlog, Lane
from .lifecycle import Lifecycle
from .worker import Phase, Worker

__all__ = ["Backlog", "Lease", "LeaseWatch", "Supervisor"]


class Supervisor:
    """Supervises the workers of one lane: residency, leases, faults, retirement.

    The coroutine methods return their collaborator's coroutine as it is (no
    await of their own), so the grant/release path pays one call, no more.
    """

    def __init__(
        self,
        lane: Lane,
        plugins: PluginHost,
        config: HostConfig,
        clock: Clock,
        task_group: TaskGroup,
        backlog: Backlog,
    ) -> None:
        self.lane = lane
        #: worker id -> the workers of this lane (``adopt``, ``forget``)
        # Invariant: a worker is forgotten only once nothing of it is charged
        #   on the lane (its exits confirmed).
        self.workers: dict[str, Worker] = {}
        self.context = Context(plugins, config, clock, task_group)
        # Exits resume a recovery stopped at an unconfirmed exit: the lifecycle's job.
        self._exits = Exits(
            self.context,
            lane,
            resume=lambda worker, generation, reason: self._lifecycle.resume(
                worker, generation, reason
            ),
        )
        self._lifecycle = Lifecycle(self.context, lane, self._exits)
        self._admission = Admission(self.context, lane, self.workers, self._lifecycle, backlog)

    @property
    def admissions(self) -> int:
        """Shapes admitted on this lane so far."""
        return self._admission.admissions

    # -- the workers it supervises -------------------------------------------------------

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
        if all(w.phase is Phase.EXITED for w in self.workers.values()):
            self.lane.close_session()

    # -- lifecycle and exits -------------------------------------------------------------

    def wait_ready(self, worker: Worker, deadline: Deadline) -> Coroutine[Any, Any, None]:
        """Return once ``worker`` is ready, starting it if it never started."""
        return self._lifecycle.wait_ready(worker, deadline)

    def start(self, worker: Worker) -> None:
        """Start ``worker`` if it never started, without waiting (a background start)."""
        self._lifecycle.start(worker)

    def report_fault(self, worker: Worker, generation: int, reason: str) -> bool:
        """Start recovery of ``generation`` unless it is stale or already recovering
        (True when this report started one); call it after releasing the lease of
        the exchange that saw the fault."""
        return self._lifecycle.report_fault(worker, generation, reason)

    def retire(self, worker: Worker) -> Coroutine[Any, Any, None]:
        """Stop new leases, drain in-flight work, confirm exit, then refund."""
        return self._lifecycle.retire(worker)

    def stop_now(self, worker: Worker) -> Coroutine[Any, Any, None]:
        """Stop ``worker`` without waiting for its calls; refunds follow its
        confirmed exit."""
        return self._exits.stop_now(worker)

    # -- admission and leases ------------------------------------------------------------

    def watch_leases(self, watch: LeaseWatch | None) -> None:
        """Tell ``watch`` of every lease from now on (``None``: stop telling)."""
        self._admission.watch_leases(watch)

    def next_request_id(self) -> int:
        return self.context.next_request_id()

    def lease(
        self,
        worker: Worker,
        shape: Shape,
        deadline: Deadline,
        note: Callable[[SynapseError | None], None] = lambda error: None,
    ) -> Coroutine[Any, Any, Lease]:
        """Admit ``shape`` on ``worker`` if needed, then lease it (see
        :meth:`.Admission.lease` for ``note``)."""
        return self._admission.lease(worker, shape, deadline, note)

    def begin_now(
        self, worker: Worker, shape: Shape, request: Callable[[int], Infer]
    ) -> tuple[Infer, Exchange] | None:
        """Begin a request at once if it need not wait (:meth:`.Admission.begin_now`)."""
        return self._admission.begin_now(worker, shape, request)

    def lease_begun(self, worker: Worker, shape: Shape) -> Lease:
        """The lease of a request :meth:`begin_now` wrote, before any await."""
        return self._admission.lease_begun(worker, shape)

    def drop_begun(self, worker: Worker, exchange: Exchange, why: str) -> None:
        """A begun request's reply will not be read: recover its generation."""
        self._admission.drop_begun(worker, exchange, why)

    def release(self, lease: Lease) -> None:
        self._admission.release(lease)

    def begin(
        self, lease: Lease, frame: Frame, check: Callable[[], None] | None = None
    ) -> Coroutine[Any, Any, Exchange]:
        """Begin an exchange under ``lease``, waiting for its channel's turn."""
        return self._admission.begin(lease, frame, check)

    def finish(self, lease: Lease, exchange: Exchange) -> Coroutine[Any, Any, Frame]:
        """The reply of a begun exchange; raises ``Fault`` on a channel fault."""
        return self._admission.finish(lease, exchange)
