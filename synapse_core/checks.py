"""Value checks for transport options, each returning ``""`` or what is wrong.

Transports use them as attrs validators (``positive``, ``seconds``,
``count``, ``appendable_file`` of :mod:`synapse_core.plugin`), which
``parse_options`` runs over the structured options, so every bad value is
reported at once with its path (for example ``options.dims: must be greater
than 0, got 0``) when the catalog opens, not when a worker trips on it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable

Check = Callable[[object], str]


def positive(value: object) -> str:
    """A number greater than 0 (and not NaN)."""
    return (
        ""
        if isinstance(value, int | float) and value > 0
        else f"must be greater than 0, got {value!r}"
    )


def seconds(value: object) -> str:
    """A finite duration of 0 seconds or more."""
    ok = isinstance(value, int | float) and math.isfinite(value) and value >= 0
    return "" if ok else f"must be a finite number of seconds, 0 or more, got {value!r}"


def count(value: object) -> str:
    """``None`` or a 1-based count."""
    ok = value is None or (isinstance(value, int) and value >= 1)
    return "" if ok else f"counts start at 1, got {value!r}"


def appendable_file(value: object) -> str:
    """``None`` or a path a worker can append to: not a directory, in a
    directory that exists. A relative path is relative to the working
    directory, which workers share with their host."""
    if value is None:
        return ""
    path = os.fspath(value)  # type: ignore[call-overload]
    if os.path.isdir(path):
        return f"{path} is a directory, not a file to append to"
    parent = os.path.dirname(path) or "."
    if not os.path.isdir(parent):
        return f"directory {parent} does not exist"
    if os.path.exists(path) and not os.access(path, os.W_OK):
        return f"{path} is not writable"
    if not os.path.exists(path) and not os.access(parent, os.W_OK | os.X_OK):
        return f"directory {parent} is not writable"
    return ""
