"""Entry point of the ``mock`` plugin (entry-point group ``synapse``)."""

from __future__ import annotations

from collections.abc import Callable

from synapse_core.plugin import Transport, hookimpl

from .transport import MockTransport


@hookimpl
def synapse_register_transports(register: Callable[[Transport], None]) -> None:
    register(MockTransport())
