"""The ``synapse`` command line.

Plugins add commands through the ``synapse_register_commands`` hook and may
reuse :func:`catalog_option` and :func:`load_config` to honour ``--catalog``
and ``SYNAPSE_CATALOG`` like the built-in commands do, :func:`installed_plugins`
to load plugins as ``synapse`` does, and :func:`unwrap` to take the error out of
the exception group a host's task group raised it in.
"""

from __future__ import annotations

from .main import installed_plugins, main, make_cli
from .options import catalog_option, json_option, load_config
from .report import unwrap

__all__ = [
    "catalog_option",
    "installed_plugins",
    "json_option",
    "load_config",
    "main",
    "make_cli",
    "unwrap",
]
