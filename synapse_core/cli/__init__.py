"""The ``synapse`` command line.

Plugins add commands through the ``synapse_register_commands`` hook and may
reuse :func:`catalog_option` and :func:`load_config` to honour ``--catalog``
and ``SYNAPSE_CATALOG`` like the built-in commands do.
"""

from __future__ import annotations

from .main import main, make_cli
from .options import catalog_option, json_option, load_config

__all__ = ["catalog_option", "json_option", "load_config", "main", "make_cli"]
