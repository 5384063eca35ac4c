"""Entry point of synapse-certify (entry-point group ``synapse``).

It adds ``synapse certify`` and nothing else. In particular it does not
implement ``synapse_observe``: a host builds observation events only when a
plugin implements that hook, so the recorder is a separate object registered
only when a recording is wanted (see :mod:`synapse_certify.recorder`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from synapse_core import hookimpl

if TYPE_CHECKING:
    import click


@hookimpl
def synapse_register_commands(cli: click.Group) -> None:
    from .cli import make_group  # imported only when the command line starts

    cli.add_command(make_group())
