"""The mock transport's model options (``[models.options]`` in a catalog)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from synapse_core import checks
from synapse_core.config import structure
from synapse_core.errors import ConfigError


@attrs.frozen
class Faults:
    """Fault knobs. Counts are per worker generation, starting at 1."""

    reply_delay_s: float = 0.0
    cold_admit_delay_s: float = 0.0
    crash_on_infer: int | None = None
    malformed_on_infer: int | None = None
    hang_on_infer: int | None = None
    crash_on_admit: int | None = None
    ignore_sigterm: bool = False
    only_generation: int | None = None

    def active(self, generation: int) -> bool:
        return self.only_generation is None or self.only_generation == generation


@attrs.frozen
class MockOptions:
    buckets: tuple[int, ...] = (16, 32, 64, 128, 256, 512)
    dims: int = 64
    max_batch: int = 32
    faults: Faults = Faults()
    trace: str | None = None


_OPTION_RULES = {
    "buckets": checks.sizes,
    "dims": checks.positive,
    "max_batch": checks.positive,
    "trace": checks.appendable_file,
}
_FAULT_RULES = {
    "reply_delay_s": checks.seconds,
    "cold_admit_delay_s": checks.seconds,
    "crash_on_infer": checks.count,
    "malformed_on_infer": checks.count,
    "hang_on_infer": checks.count,
    "crash_on_admit": checks.count,
    "only_generation": checks.count,
}


def parse_options(
    options: Mapping[str, Any], source: str = "<options>", root: str = "options"
) -> MockOptions:
    """Structure and check ``options``; errors name the path, e.g.
    ``options.faults.crash_on_infer``, and every bad value is reported at once."""
    parsed = structure(dict(options), MockOptions, source, root="." + root)
    problems = checks.problems(parsed, root, _OPTION_RULES)
    problems += checks.problems(parsed.faults, f"{root}.faults", _FAULT_RULES)
    if problems:
        raise ConfigError(source, problems)
    return parsed
