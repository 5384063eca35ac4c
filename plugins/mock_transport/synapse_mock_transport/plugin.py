"""Entry point of the ``mock`` plugin (entry-point group ``synapse``)."""

from __future__ import annotations

from collections.abc import Callable

from synapse_core.hookspecs import hookimpl
from synapse_core.transport import Transport

from .transport import MockTransport


@hookimpl
def synapse_register_transports(register: Callable[[Transport], None]) -> None:
    register(MockTransport())
