"""The Ray Serve deployment: each replica is one Synapse host serving the
HTTP app of ``synapse serve``.

The app is found by name (``http`` in the ``synapse.apps`` entry-point
group, which synapse-http registers), not imported: one plugin knows no
other's modules, and a missing synapse-http is named in the error.

A replica opens its host as it starts (which starts no worker and takes no
lane), makes each model resident through Ray's multiplexing on the first
request for it, and retires every worker, confirming each exit, when Ray
shuts it down.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import attrs
import ray
from ray import serve
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from synapse_core.frontend import AppFactory, app_factory

from .replica_host import ReplicaHost
from .residency import Residency, Resident, load_resident
from .settings import Catalog

#: the response header naming the replica that answered
REPLICA_HEADER = "x-synapse-replica"
#: the ASGI app each replica serves, and the distribution that provides it
HTTP_APP, HTTP_DISTRIBUTION = "http", "synapse-http"


def http_app() -> AppFactory:
    """synapse-http's app factory; :class:`~synapse_core.PluginError` saying
    to install synapse-http when it is not installed."""
    return app_factory(HTTP_APP, HTTP_DISTRIBUTION)


@attrs.frozen
class ReplicaView:
    """What one replica holds, for tools and tests (see :meth:`SynapseHosts.describe`)."""

    replica: str
    actor: str
    pid: int
    #: model name -> worker pid, for every worker that has not exited
    workers: dict[str, int]
    #: model name -> calls in flight on its worker
    inflight: dict[str, int]


@serve.deployment(name="SynapseHosts")
@serve.ingress()
class SynapseHosts:
    """One Synapse host per replica; build it with :func:`synapse_ray.app`."""

    def __init__(
        self, catalog: Catalog, max_models_per_replica: int, http: Mapping[str, object]
    ) -> None:
        residency = Residency()
        self.replica = ReplicaHost(catalog.config(), around_call=residency)
        self.http = http
        context = serve.get_replica_context()
        self.replica_id = context.replica_id.unique_id
        replica = self.replica

        async def load(model: str) -> Resident:
            return await load_resident(replica, model)

        # Ray's LRU cache of models, and its report to the routers of which
        # models this replica holds; the bound is a setting, hence not a
        # decorator on a method.
        self.resident = serve.multiplexed(max_num_models_per_replica=max_models_per_replica)(load)
        residency.resident = self.resident

    async def __serve_build_asgi_app__(self) -> ASGIApp:
        """The HTTP app of ``synapse serve`` over this replica's host."""
        host = await self.replica.get()
        return Answering(http_app()(host, self.http), self.replica_id)

    async def describe(self) -> dict[str, Any]:
        """This replica's id, actor, pid and live workers (call it through a
        handle with ``multiplexed_model_id`` to reach the replica holding a model)."""
        workers: dict[str, int] = {}
        inflight: dict[str, int] = {}
        host = self.replica.opened
        if host is not None:
            for lane in host.snapshot().lanes.values():
                for worker in lane.workers:
                    if worker.pid is not None:
                        workers[worker.model] = worker.pid
                        inflight[worker.model] = worker.inflight
        actor = ray.get_runtime_context().get_actor_name() or ""
        view = ReplicaView(self.replica_id, actor, os.getpid(), workers, inflight)
        return attrs.asdict(view)

    def check_health(self) -> None:
        """Ray's periodic health check: a host that failed to open, or whose
        task group ended with an error, fails it, and Ray replaces the replica."""
        self.replica.check()

    async def __del__(self) -> None:
        # Ray awaits this once the replica's ongoing requests are drained (or
        # its graceful_shutdown_timeout_s ran out), before it kills the actor.
        await self.replica.aclose()


class Answering:
    """Names the replica in every answer (``x-synapse-replica``)."""

    def __init__(self, app: ASGIApp, replica_id: str) -> None:
        self.app = app
        self.header = (REPLICA_HEADER.encode(), replica_id.encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), self.header]
            await send(message)

        await self.app(scope, receive, sending)
