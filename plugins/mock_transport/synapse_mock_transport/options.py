"""The mock transport's model options (``[models.options]`` in a catalog)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from synapse_core.plugin import Faults, WorkerOptions, bucket_sizes, positive
from synapse_core.plugin import parse_options as parse_into


@attrs.frozen
class MockOptions(WorkerOptions):
    """Plus the kit's ``faults`` and ``trace`` (see :class:`WorkerOptions`)."""

    buckets: tuple[int, ...] = attrs.field(
        default=(16, 32, 64, 128, 256, 512), validator=bucket_sizes
    )
    dims: int = attrs.field(default=64, validator=positive)
    max_batch: int = attrs.field(default=32, validator=positive)


def parse_options(
    options: Mapping[str, Any], source: str = "<options>", root: str = "options"
) -> MockOptions:
    """Structure ``options``; errors name the path, e.g. ``options.faults.crash_on_infer``."""
    return parse_into(options, MockOptions, source, root)


__all__ = ["Faults", "MockOptions", "parse_options"]
