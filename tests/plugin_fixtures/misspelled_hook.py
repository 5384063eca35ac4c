"""A plugin whose hook name has a typo (``transport`` for ``transports``)."""

from __future__ import annotations

from collections.abc import Callable

from synapse_core.hookspecs import hookimpl
from synapse_core.testing.fake import InProcessFakeTransport
from synapse_core.transport import Transport


@hookimpl
def synapse_register_transport(register: Callable[[Transport], None]) -> None:
    register(InProcessFakeTransport(name="misspelled"))
