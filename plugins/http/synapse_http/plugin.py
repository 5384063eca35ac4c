"""Entry point of synapse-http (entry-point group ``synapse``): adds ``synapse serve``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from synapse_core import hookimpl

if TYPE_CHECKING:
    import click


@hookimpl
def synapse_register_commands(cli: click.Group) -> None:
    from .cli import serve_command  # the server's libraries load only when it runs

    cli.add_command(serve_command)
