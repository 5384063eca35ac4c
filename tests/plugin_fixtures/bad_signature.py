"""A plugin whose hook implementation asks for an argument the spec lacks."""

from __future__ import annotations

from collections.abc import Callable

from synapse_core.hookspecs import hookimpl
from synapse_core.testing.fake import InProcessFakeTransport
from synapse_core.transport import Transport


@hookimpl
def synapse_register_transports(register: Callable[[Transport], None], lane: str) -> None:
    register(InProcessFakeTransport(name="bad-signature"))
