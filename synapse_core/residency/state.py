"""What a lane supervisor holds: its lane, its workers and what it reports to.

:class:`SupervisorState` is the base the supervisor's rooms build on
(:mod:`.exits`, :mod:`.lifecycle`, :mod:`.admission`). Only those modules
(and ``Supervisor``'s own methods) assign to a supervisor or to a
:class:`~.worker.Worker`; the invariants are written at the top of the module
that keeps each of them.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import anyio
from anyio.abc import TaskGroup

from ..config import HostConfig
from ..deadline import Clock
from ..observation import Event
from ..plugins import PluginHost
from .lane import Backlog, Lane
from .worker import Worker


class SupervisorState:
    """The state of one lane's supervisor, and its observation sink."""

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
        self.plugins = plugins
        self.config = config
        self.clock = clock
        self.tg = task_group
        self.backlog = backlog
        self.workers: dict[str, Worker] = {}
        self.admissions = 0
        self._ids = itertools.count(1)
        self._observe = plugins.observer()
        self._certify = config.certify_observation and self._observe is not None
        self._lane_opening: anyio.Lock = anyio.Lock()

    def _emit(self, make: Callable[[], Event]) -> None:
        # Events are built only when someone listens: serving pays nothing otherwise.
        if self._observe is not None:
            try:
                self._observe(make())
            except Exception as exc:  # a broken sink must not take serving down
                self.plugins.problems.append(f"synapse_observe failed: {exc!r}")
