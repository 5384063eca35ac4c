"""The direct-ANE transport's model options (``[models.options]`` in a catalog)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import attrs

from synapse_core.plugin import WorkerOptions, bucket_sizes, positive, seconds
from synapse_core.plugin import parse_options as parse_into

DeviceKind = Literal["hardware", "simulated"]
DEVICE_KINDS: tuple[DeviceKind, ...] = ("hardware", "simulated")


@attrs.frozen
class AneOptions(WorkerOptions):
    """Plus the kit's ``faults`` and ``trace`` (see :class:`WorkerOptions`)."""

    #: sequence buckets the worker compiles programs for (tokens)
    buckets: tuple[int, ...] = attrs.field(default=(64, 128, 256, 512), validator=bucket_sizes)
    dims: int = attrs.field(default=384, validator=positive)
    max_batch: int = attrs.field(default=8, validator=positive)
    #: ``simulated`` forces the simulated device even where the hardware runs
    device: DeviceKind = "hardware"
    #: simulated device only: seconds a cold compile takes
    compile_delay_s: float = attrs.field(default=0.0, validator=seconds)


def parse_options(
    options: Mapping[str, Any], source: str = "<options>", root: str = "options"
) -> AneOptions:
    """Structure and check ``options``; errors name the path, e.g. ``options.dims``."""
    return parse_into(options, AneOptions, source, root)
