"""``python -m synapse_core.cli``: the same as the ``synapse`` command."""

from __future__ import annotations

from .main import main

main()
