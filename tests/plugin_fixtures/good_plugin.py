"""A well-formed plugin: the in-process fake transport, registered under the
name the shipped catalog's entries use (``mock``)."""

from __future__ import annotations

from collections.abc import Callable

from synapse_core.hookspecs import hookimpl
from synapse_core.testing.fake import InProcessFakeTransport
from synapse_core.transport import Transport


@hookimpl
def synapse_register_transports(register: Callable[[Transport], None]) -> None:
    register(InProcessFakeTransport("mock"))
