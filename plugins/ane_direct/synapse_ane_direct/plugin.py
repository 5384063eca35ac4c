"""Entry point of the ``ane_direct`` plugin (entry-point group ``synapse``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from synapse_core.plugin import Transport, hookimpl

from .transport import AneDirectTransport

if TYPE_CHECKING:
    import click


@hookimpl
def synapse_register_transports(register: Callable[[Transport], None]) -> None:
    register(AneDirectTransport())


@hookimpl
def synapse_register_commands(cli: click.Group) -> None:
    from .cli import make_group  # imported only when the command line starts

    cli.add_command(make_group())
