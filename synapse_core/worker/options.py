"""Structuring a model's catalog options into a transport's options class.

Values are checked by attrs validators that raise
:class:`~synapse_core.errors.FieldInvalid`; :func:`parse_options` runs them
after structuring, so every bad value is reported at once, each with its path.
The ready validators wrap the checks of :mod:`synapse_core.checks`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import attrs

from .. import checks
from ..config import structure
from ..errors import ConfigError, FieldInvalid
from ..wire import bucket_problem

_O = TypeVar("_O")
Validator = Callable[[Any, "attrs.Attribute[Any]", Any], None]


def parse_options(
    options: Mapping[str, Any], cls: type[_O], source: str = "<options>", root: str = "options"
) -> _O:
    """Structure ``options`` into the attrs class ``cls`` and check every value.

    Raises :class:`~synapse_core.errors.ConfigError` whose problems name each
    bad option's path (``options.faults.crash_on_infer: counts start at 1,
    got 0``): unknown keys and wrong types first; then every value a field
    validator refuses, all at once. A catalog adds the ``models[i].`` prefix.
    Call it from ``Transport.validate_model`` with
    ``source=f"model {model.name!r}"`` (the default ``validate_model`` does,
    with ``Transport.options_type``).
    """
    # Validators run below, over the whole structure, not one by one in
    # __init__ (which stops at the first bad value).
    with attrs.validators.disabled():
        parsed = structure(dict(options), cls, source, root="." + root)
    problems = list(_refused(parsed, root))
    if problems:
        raise ConfigError(source, problems)
    return parsed


def _refused(obj: Any, path: str) -> Iterator[str]:
    """``path.field: problem`` for every value of ``obj`` its validator refuses;
    nested attrs values after the plain ones."""
    nested = []
    for field in attrs.fields(type(obj)):
        value = getattr(obj, field.name)
        if field.validator is not None:
            try:
                field.validator(obj, field, value)
            except FieldInvalid as exc:
                yield f"{path}.{exc.field}: {exc}"
            except (TypeError, ValueError) as exc:
                yield f"{path}.{field.name}: {exc}"
        if attrs.has(type(value)):
            nested.append((value, f"{path}.{field.name}"))
    for value, where in nested:
        yield from _refused(value, where)


def validator(check: checks.Check) -> Validator:
    """An attrs validator from a check of :mod:`synapse_core.checks` (a function
    returning ``""`` or what is wrong with a value)."""

    def validate(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        problem = check(value)
        if problem:
            raise FieldInvalid(attribute.name, problem)

    return validate


#: a number greater than 0
positive = validator(checks.positive)
#: a finite duration of 0 seconds or more
seconds = validator(checks.seconds)
#: ``None`` or a count from 1
count = validator(checks.count)
#: ``None`` or a file a worker can append to (not a directory; its directory exists)
appendable_file = validator(checks.appendable_file)


#: most buckets a worker may have (each is a compiled shape; and a worker's
#: options travel on its command line, which has room for only so many)
MAX_BUCKETS = 1024


def bucket_sizes(instance: object, attribute: attrs.Attribute[Any], value: Sequence[int]) -> None:
    """Buckets a worker can report: at least one, positive, none twice (any
    order), at most :data:`MAX_BUCKETS`."""
    if len(value) > MAX_BUCKETS:
        raise FieldInvalid(
            attribute.name, f"{len(value)} buckets is more than the {MAX_BUCKETS} a worker may have"
        )
    problem = bucket_problem(sorted(value))
    if problem:
        raise FieldInvalid(attribute.name, f"{problem}, got {list(value)}")
