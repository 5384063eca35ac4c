"""The entry point (group ``synapse``, name ``hash``)."""

from __future__ import annotations

from collections.abc import Callable

from synapse_core.plugin import Transport, hookimpl

from .transport import HashTransport


@hookimpl
def synapse_register_transports(register: Callable[[Transport], None]) -> None:
    register(HashTransport())
