"""What a launch is: the request a transport gets, the started worker it
returns, and the process and lane types around them.

Apart from :mod:`synapse_core.transport` so that :mod:`synapse_core.process`
(the default launcher, which :class:`~synapse_core.transport.Transport`
calls) and the transport base class both depend on these types and not on
each other. Transport authors import them from :mod:`synapse_core.plugin`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import attrs
from anyio.abc import ByteReceiveStream, ByteSendStream, TaskGroup

from .config import ModelSpec


@attrs.frozen
class LaneInfo:
    """The device lane a model runs on.

    ``capacity`` is the default in reservation units (the host's ``[lanes]``
    config may override it). ``hardware_lock`` lanes are opened through
    :meth:`Transport.open_lane` before their first worker launches.
    """

    lane_id: str
    capacity: int = 1_000_000
    hardware_lock: bool = False


@runtime_checkable
class WorkerProcess(Protocol):
    """A launched worker's process, as the supervisor needs it.

    ``wait`` must return only once the process is gone for good (reaped): the
    supervisor refunds a worker's reservations only after it returns.
    """

    @property
    def pid(self) -> int | None: ...

    @property
    def returncode(self) -> int | None: ...

    def terminate(self) -> None:
        """Ask the worker (and its process group) to stop: SIGTERM."""

    def kill(self) -> None:
        """Force the worker (and its process group) to stop: SIGKILL."""

    async def wait(self) -> int:
        """Return the exit status once the worker has exited and been reaped."""
        ...


class ProcessGroup:
    """Mix into a :class:`WorkerProcess` whose worker leads a process group
    (as :func:`~synapse_core.process.spawn_worker`'s do).

    The host then confirms an exit only once the whole group is gone: a child
    the worker started could otherwise hold the device, or an inherited lane
    lock, after the worker's reservations were refunded. ``terminate`` and
    ``kill`` must signal the whole group.
    """

    def group_alive(self) -> bool:
        """Whether any process of the group still runs (zombies count as gone)."""
        raise NotImplementedError


@attrs.frozen
class LaunchRequest:
    """What the host asks a transport to start."""

    model: ModelSpec
    worker_id: str
    generation: int
    lane: LaneInfo
    lane_session: LaneSession | None = None
    #: The host's service task group, for in-process workers; transports that
    #: start subprocesses ignore it.
    task_group: TaskGroup | None = None


@attrs.frozen
class Launched:
    """A started worker: the host end of its byte channel and its process."""

    send: ByteSendStream
    receive: ByteReceiveStream
    process: WorkerProcess


class LaneSession:
    """A held device lane (e.g. the direct-ANE lane lock).

    ``pass_fds`` are inherited by every worker launched on the lane, so the
    lane stays held while any worker that can use the device is alive.
    """

    pass_fds: Sequence[int] = ()
    holder: str = ""

    def close(self) -> None:
        """Release the host's hold; called once every worker's exit is confirmed."""
