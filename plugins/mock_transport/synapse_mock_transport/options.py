"""The mock transport's model options (``[models.options]`` in a catalog)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from synapse_core.plugin import Faults, HashOptions
from synapse_core.plugin import parse_options as parse_into

#: ``[models.options]`` of a mock model (the kit's hash model's), plus the
#: kit's ``faults`` and ``trace`` (see :class:`~synapse_core.plugin.WorkerOptions`)
MockOptions = HashOptions


def parse_options(
    options: Mapping[str, Any], source: str = "<options>", root: str = "options"
) -> MockOptions:
    """Structure ``options``; errors name the path, e.g. ``options.faults.crash_on_infer``."""
    return parse_into(options, MockOptions, source, root)


__all__ = ["Faults", "MockOptions", "parse_options"]
