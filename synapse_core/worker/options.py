"""Structuring a model's catalog options into a transport's options class."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import attrs

from ..config import FieldInvalid, structure
from ..wire import bucket_problem

_O = TypeVar("_O")


def parse_options(
    options: Mapping[str, Any], cls: type[_O], source: str = "<options>", root: str = "options"
) -> _O:
    """Structure ``options`` into the attrs class ``cls``.

    Raises :class:`~synapse_core.errors.ConfigError` whose problems name each
    bad option's path (``options.faults.crash_on_infer: counts from 1, got
    0``): unknown keys, wrong types, and anything a field validator refuses
    with :class:`~synapse_core.config.FieldInvalid`. A catalog adds the
    ``models[i].`` prefix. Call it from ``Transport.validate_model`` with
    ``source=f"model {model.name!r}"``.
    """
    return structure(dict(options), cls, source, root="." + root)


# -- attrs validators that report with FieldInvalid (so errors keep their path) ----------


def positive(instance: object, attribute: attrs.Attribute[Any], value: float) -> None:
    """A number greater than 0."""
    if not value > 0:
        raise FieldInvalid(attribute.name, f"must be greater than 0, got {value!r}")


def seconds(instance: object, attribute: attrs.Attribute[Any], value: float) -> None:
    """A finite duration of 0 seconds or more."""
    if not (math.isfinite(value) and value >= 0):
        raise FieldInvalid(
            attribute.name, f"must be a finite number of seconds >= 0, got {value!r}"
        )


def bucket_sizes(instance: object, attribute: attrs.Attribute[Any], value: Sequence[int]) -> None:
    """Buckets a worker can report: at least one, positive, none twice (any order)."""
    problem = bucket_problem(sorted(value))
    if problem:
        raise FieldInvalid(attribute.name, f"{problem}, got {list(value)}")
