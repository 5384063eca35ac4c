"""Entry point of the ``ane_direct`` plugin (entry-point group ``synapse``)."""

from __future__ import annotations

from collections.abc import Callable

from synapse_core.plugin import Transport, hookimpl

from .transport import AneDirectTransport


@hookimpl
def synapse_register_transports(register: Callable[[Transport], None]) -> None:
    register(AneDirectTransport())
