"""The direct-ANE transport's model options (``[models.options]`` in a catalog)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import attrs

from synapse_core import checks
from synapse_core.config import structure
from synapse_core.errors import ConfigError

DeviceKind = Literal["hardware", "simulated"]
DEVICE_KINDS: tuple[DeviceKind, ...] = ("hardware", "simulated")


@attrs.frozen
class AneOptions:
    #: sequence buckets the worker compiles programs for (tokens)
    buckets: tuple[int, ...] = (64, 128, 256, 512)
    dims: int = 384
    max_batch: int = 8
    #: ``simulated`` forces the simulated device even where the hardware runs
    device: DeviceKind = "hardware"
    #: simulated device only: seconds a cold compile takes
    compile_delay_s: float = 0.0
    #: append one JSON line per frame the worker handles to this file
    trace: str | None = None


_RULES = {
    "buckets": checks.sizes,
    "dims": checks.positive,
    "max_batch": checks.positive,
    "compile_delay_s": checks.seconds,
    "trace": checks.appendable_file,
}


def parse_options(
    options: Mapping[str, Any], source: str = "<options>", root: str = "options"
) -> AneOptions:
    """Structure and check ``options``; errors name the path, e.g. ``options.dims``.

    Values are checked after structuring (not in attrs validators) so every
    bad value is reported at once, each with its field's path.
    """
    parsed = structure(dict(options), AneOptions, source, root="." + root)
    problems = checks.problems(parsed, root, _RULES)
    if problems:
        raise ConfigError(source, problems)
    return parsed
