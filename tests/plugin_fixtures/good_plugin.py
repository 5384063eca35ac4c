"""A well-formed plugin: registers the in-process mock transport."""

from __future__ import annotations

from collections.abc import Callable

from synapse_core.hookspecs import hookimpl
from synapse_core.transport import Transport
from synapse_mock_transport.inprocess import InProcessTransport


@hookimpl
def synapse_register_transports(register: Callable[[Transport], None]) -> None:
    register(InProcessTransport())
