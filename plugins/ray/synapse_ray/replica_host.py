"""One Synapse host per Ray Serve replica, opened on first use and closed once.

A host's task group must be entered and left by one task, while a replica
opens its host in whichever request comes first and closes it in its
destructor: so one owner task holds the host open, and requests and the
destructor only talk to it. Ray Serve runs replica code on an asyncio loop;
so does this module.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from synapse_core import AroundCall, Host, HostConfig, PluginHost, Retired, open_host


class ReplicaHost:
    """The replica's host: opened by the first :meth:`get`, closed by :meth:`aclose`.

    Opening starts no worker and takes no lane: a worker starts when a model
    is loaded, so a replica that never sees a request holds nothing.
    """

    def __init__(
        self,
        config: HostConfig,
        *,
        plugins: PluginHost | Iterable[object] | None = None,
        around_call: AroundCall | None = None,
    ) -> None:
        self.config = config
        self._plugins = plugins
        self._around_call = around_call
        self._host: Host | None = None
        self._error: BaseException | None = None
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._owner: asyncio.Task[None] | None = None
        self.closing = False

    @property
    def opened(self) -> Host | None:
        """The host while it is open, else ``None`` (for synchronous reads)."""
        return self._host

    async def get(self) -> Host:
        """The open host; the first caller opens it, the others wait for it."""
        if self.closing:
            raise Retired("this replica is shutting down; it takes no new work")
        if self._owner is None:
            self._owner = asyncio.get_running_loop().create_task(self._own(), name="synapse host")
        await self._ready.wait()
        if self._host is None:
            assert self._error is not None
            raise self._error
        return self._host

    def check(self) -> None:
        """Raise what ended the host, if it ended on an error."""
        if self._error is not None:
            raise RuntimeError(f"the replica's Synapse host failed: {self._error!r}")

    async def aclose(self) -> None:
        """Retire every worker, confirming each exit, then let the host go.

        Idempotent, and shielded: a cancelled caller does not cut the close
        short (``Host.aclose`` bounds itself).
        """
        self.closing = True
        if self._owner is None:
            return
        self._stop.set()
        await asyncio.shield(self._owner)

    async def _own(self) -> None:
        try:
            async with open_host(
                self.config, plugins=self._plugins, around_call=self._around_call
            ) as host:
                self._host = host
                self._ready.set()
                await self._stop.wait()
        except Exception as exc:  # opening failed: every caller sees why
            self._error = exc
        finally:
            self._host = None
            self._ready.set()
