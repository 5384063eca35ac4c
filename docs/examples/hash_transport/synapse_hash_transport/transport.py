"""The ``hash`` transport: subprocess workers on its own lane, and an
in-process variant of the same worker for fast tests."""

from __future__ import annotations

import itertools

from synapse_core.plugin import InProcessWorkers, Launched, LaunchRequest, Transport

from .worker import HashOptions, HashWorker

_pids = itertools.count(7_000_000)


class HashTransport(Transport):
    """Checking options, declaring buckets (so longer inputs are refused before
    any worker starts), launching the worker and its lane (``hash:0``) are
    ``Transport``'s defaults."""

    name = "hash"
    worker = "synapse_hash_transport.worker:HashWorker"
    options_type = HashOptions


class InProcessHashTransport(InProcessWorkers, HashTransport):
    """The same worker as a task of the host (tests)."""

    def __init__(self) -> None:
        InProcessWorkers.__init__(self)

    async def launch(self, request: LaunchRequest) -> Launched:
        return self.start_worker(request, HashWorker, next(_pids))
