"""What the collaborators of one lane's supervisor share: the host's plugins,
config, clock and task group, the lane's request ids and its observation sink.

It holds no residency state: that is the :class:`~.lane.Lane`'s and each
:class:`~.worker.Worker`'s, changed only through their own methods.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from anyio.abc import TaskGroup

from ..config import HostConfig
from ..deadline import Clock
from ..observation import Event
from ..plugins import PluginHost


class Context:
    """The surroundings of one lane's supervisor, handed to each collaborator."""

    def __init__(
        self, plugins: PluginHost, config: HostConfig, clock: Clock, task_group: TaskGroup
    ) -> None:
        self.plugins = plugins
        self.config = config
        self.clock = clock
        self.tg = task_group
        # Invariant: request ids of the lane only grow, so none is used twice.
        self._ids = itertools.count(1)
        #: the observation sink, or ``None`` when no plugin listens
        self.observe = plugins.observer()
        #: send inventory requests after admissions, for certification
        self.certify = config.certify_observation and self.observe is not None

    def next_request_id(self) -> int:
        return next(self._ids)

    def emit(self, make: Callable[[], Event]) -> None:
        # Events are built only when someone listens: serving pays nothing otherwise.
        if self.observe is not None:
            try:
                self.observe(make())
            except Exception as exc:  # a broken sink must not take serving down
                self.plugins.problems.append(f"synapse_observe failed: {exc!r}")
