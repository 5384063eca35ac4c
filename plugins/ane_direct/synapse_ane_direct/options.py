"""The direct-ANE transport's model options (``[models.options]`` in a catalog)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

import attrs

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


def parse_options(
    options: Mapping[str, Any], source: str = "<options>", root: str = "options"
) -> AneOptions:
    """Structure and check ``options``; errors name the path, e.g. ``options.dims``."""
    parsed = structure(dict(options), AneOptions, source, root="." + root)
    problems = _problems(parsed, root)
    if problems:
        raise ConfigError(source, problems)
    return parsed


def _problems(o: AneOptions, root: str) -> list[str]:
    # Values are checked after structuring (not in attrs validators) so each
    # message keeps its field's path.
    problems = []
    if not o.buckets or any(b <= 0 for b in o.buckets):
        problems.append(f"{root}.buckets: must be a non-empty list of positive sizes")
    elif len(set(o.buckets)) != len(o.buckets):
        problems.append(f"{root}.buckets: lists a bucket twice")
    if o.dims <= 0:
        problems.append(f"{root}.dims: must be greater than 0, got {o.dims}")
    if o.max_batch <= 0:
        problems.append(f"{root}.max_batch: must be greater than 0, got {o.max_batch}")
    if not (math.isfinite(o.compile_delay_s) and o.compile_delay_s >= 0):
        problems.append(f"{root}.compile_delay_s: must be a finite number >= 0")
    return problems
