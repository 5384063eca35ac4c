"""The mock worker: the kit's :class:`~synapse_core.plugin.HashWorker` over the mock model.

The transport starts it as ``synapse_mock_transport.worker:MockWorker``; the
in-process variant runs the same class over memory streams.
"""

from __future__ import annotations

import sys

from synapse_core.plugin import SPLITMIX64, HashWorker, worker_main

from . import __version__

IMPLEMENTATION = "synapse-mock-transport"


class MockWorker(HashWorker):
    """Deterministic outputs; fault knobs and tracing come from the kit."""

    scheme = SPLITMIX64
    identity_format = "mock:{package}:d{dims}:v1"
    implementation = IMPLEMENTATION
    version = __version__


if __name__ == "__main__":
    sys.exit(worker_main(MockWorker))
