"""Ray Serve's model multiplexing mapped onto a Synapse host.

Ray keeps, per replica, an LRU cache of "models" produced by a load function,
and tells its routers which replica holds which model id, so a request that
carries the ``serve_multiplexed_model_id`` header goes to a replica that
already holds that model. Here the load function is ``host.load`` and the
cached object is a :class:`Resident` whose unloading is ``host.retire``
(drain, confirmed exit, refund). :class:`Residency` is the hook the
replica's host runs around each call: it makes the call's model resident
through Ray's cache first, so Ray's table of which replica holds what stays
true whichever way the request named its model.

Ray's proxy routes by the header only (it does not read bodies): a request
without it is served by whichever replica Ray picks, which then holds the
model too.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from synapse_core import Deadline, Retired

from .replica_host import ReplicaHost

#: a call finding its model retired between being made resident and being
#: started (Ray's LRU evicted it for another model) makes it resident again,
#: this many times at most; nothing of the call had run.
RESIDENCY_ATTEMPTS = 3
#: how long a model's worker may take to start when it is made resident
LOAD_TIMEOUT_S = 120.0

_R = TypeVar("_R")


class Resident:
    """A model held by this replica, as Ray's multiplexing cache holds it.

    Ray unloads an evicted model by awaiting its ``__del__`` if it has one.
    It is set on the instance, not the class: the garbage collector calls
    only a class's ``__del__``, and must not be handed a coroutine function.
    """

    def __init__(self, model: str, replica: ReplicaHost) -> None:
        self.model = model
        self._replica = replica
        self.__del__ = self.unload

    async def unload(self) -> None:
        """Retire the model's worker; a closing replica retires it itself."""
        if self._replica.closing:
            return
        host = await self._replica.get()
        await host.retire(self.model)


async def load_resident(replica: ReplicaHost, model: str) -> Resident:
    """Ray's load function: start the model's worker and wait for its hello.

    Refusals (unknown model, transport unavailable) and capacity errors are
    raised to the caller; Ray then caches nothing for the model.
    """
    host = await replica.get()
    await host.load(model, deadline=Deadline.after(LOAD_TIMEOUT_S))
    return Resident(model, replica)


class Residency:
    """What the replica's host runs around each embed and rerank call
    (``open_host(around_call=...)``): make the call's model resident through
    :attr:`resident` (Ray's multiplexed load function) first.

    The HTTP app finds the model a request names (body, ``?model=``, header
    or the catalog's default) and calls the host with it, so the host's hook
    is the one place that sees every call's model, however it was named; the
    host runs it only for a model its catalog accepts, so an unknown model
    makes Ray load (and evict) nothing.
    """

    def __init__(self) -> None:
        #: Ray's multiplexed load function; ``None`` serves without Ray's cache
        self.resident: Callable[[str], Awaitable[Resident]] | None = None

    async def __call__(self, model: str, call: Callable[[], Awaitable[_R]]) -> _R:
        for attempt in range(1, RESIDENCY_ATTEMPTS + 1):
            if self.resident is not None:
                await self.resident(model)
            try:
                return await call()
            except Retired:
                # A closing host retires everything: the attempts run out.
                if attempt == RESIDENCY_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")
