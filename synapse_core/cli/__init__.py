"""The ``synapse`` command line, and the API for plugins that add commands.

Plugins add commands through the ``synapse_register_commands`` hook and may
import from this module (its submodules are internal): :func:`catalog_option`
and :func:`load_config` to honour ``--catalog`` and ``SYNAPSE_CATALOG`` like
the built-in commands do (with :func:`model_options` for ``--model`` and
``--transport``, whose values are :class:`ModelSource`), :func:`json_option` for ``--json``,
:func:`installed_plugins` to load plugins as ``synapse`` does, :func:`unwrap`
to take the error out of the exception group a host's task group raised it
in, and :func:`make_cli` (the ``synapse`` command over chosen plugins) to
test them with click's ``CliRunner``.
"""

from __future__ import annotations

from ..transport import ModelSource
from .main import installed_plugins, main, make_cli
from .models import model_options
from .options import catalog_option, json_option, load_config
from .report import unwrap

__all__ = [
    "ModelSource",
    "catalog_option",
    "installed_plugins",
    "json_option",
    "load_config",
    "main",
    "make_cli",
    "model_options",
    "unwrap",
]
