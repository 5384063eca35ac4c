"""The mock transport's model options (``[models.options]`` in a catalog)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from synapse_core.config import FieldInvalid, structure


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


def _buckets(instance: object, attribute: attrs.Attribute[Any], value: tuple[int, ...]) -> None:
    if not value or any(b <= 0 for b in value):
        raise FieldInvalid(
            "buckets", f"must be a non-empty list of positive sizes, got {list(value)}"
        )


@attrs.frozen
class MockOptions:
    buckets: tuple[int, ...] = attrs.field(default=(16, 32, 64, 128, 256, 512), validator=_buckets)
    dims: int = 64
    max_batch: int = 32
    faults: Faults = Faults()
    trace: str | None = None


def parse_options(
    options: Mapping[str, Any], source: str = "<options>", root: str = "options"
) -> MockOptions:
    """Structure ``options``; errors name the path, e.g. ``options.faults.crash_on_infer``."""
    return structure(dict(options), MockOptions, source, root="." + root)
