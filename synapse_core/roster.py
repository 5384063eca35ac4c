"""The host's workers: a supervisor per lane, a model's worker slots, and
the making of a worker record in one.

Only :class:`Roster` fills a slot (:meth:`Replicas.fill`) or adds a lane's
supervisor; the host asks it for both.
"""

from __future__ import annotations

import itertools

from anyio.abc import TaskGroup

from .catalog import Entry
from .config import HostConfig
from .deadline import Clock
from .plugins import PluginHost
from .replicas import Replicas
from .residency.lane import Lane
from .residency.supervisor import Backlog, Supervisor
from .residency.worker import Phase, Worker


class Roster:
    def __init__(
        self,
        config: HostConfig,
        plugins: PluginHost,
        clock: Clock,
        tg: TaskGroup,
        backlog: Backlog,
    ) -> None:
        self._config = config
        self._plugins = plugins
        self._clock = clock
        self._tg = tg
        self._backlog = backlog
        #: per lane id, its supervisor (made when a model of the lane first needs one)
        # Invariant: one supervisor per lane, never replaced or dropped.
        self.supervisors: dict[str, Supervisor] = {}
        #: per model, its worker slots (``ModelSpec.workers``)
        # Invariant: one ``Replicas`` per model, kept across retire and load.
        self.replicas: dict[str, Replicas] = {}
        # Invariant: only grows, so no two worker records share an id.
        self._serial = itertools.count(1)

    def supervisor(self, entry: Entry) -> Supervisor:
        assert entry.lane is not None
        lane_id = entry.lane.lane_id
        sup = self.supervisors.get(lane_id)
        if sup is None:
            lane_config = self._config.lanes.get(lane_id)
            capacity = lane_config.capacity if lane_config else entry.lane.capacity
            sup = Supervisor(
                Lane(entry.lane, capacity),
                self._plugins,
                self._config,
                self._clock,
                self._tg,
                self._backlog,
            )
            self.supervisors[lane_id] = sup
        return sup

    def replicas_of(self, entry: Entry) -> Replicas:
        replicas = self.replicas.get(entry.spec.name)
        if replicas is None:
            replicas = self.replicas[entry.spec.name] = Replicas.of(entry.spec.workers)
        return replicas

    def worker(self, entry: Entry, slot: int, fresh: bool = False) -> Worker:
        """The worker record in the model's ``slot``; ``fresh`` replaces one
        that is gone for good.

        Only an explicit load replaces a failed worker, so a crash loop stopped
        by the restart budget is not restarted by the next call.
        """
        name = entry.spec.name
        replicas = self.replicas_of(entry)
        worker = replicas.slots[slot]
        gone = worker is not None and (
            worker.phase is Phase.EXITED or (fresh and worker.phase is Phase.FAILED)
        )
        if worker is None or gone:
            sup = self.supervisor(entry)
            if worker is not None:
                sup.forget(worker)
            assert entry.transport is not None
            worker = Worker(
                worker_id=f"{name}#{next(self._serial)}",
                spec=entry.spec,
                transport=entry.transport.transport,
                tokenizer=entry.tokenizer,
                lane=sup.lane,
            )
            replicas.fill(slot, worker)
            sup.adopt(worker)
        return worker

    def live(self, model: str) -> list[Worker]:
        """The model's live worker records, in slot order."""
        replicas = self.replicas.get(model)
        return replicas.live() if replicas is not None else []
