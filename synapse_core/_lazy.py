"""Names a package module exports, imported on first use (workers start fast)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any


def lazy_getattr(
    module: str, package: str, exports: Mapping[str, str], namespace: MutableMapping[str, Any]
) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``exports[name]`` (a submodule of
    ``package``) on first use and caches the value in ``namespace``."""

    def get(name: str) -> Any:
        where = exports.get(name)
        if where is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{where}"), name)
        namespace[name] = value
        return value

    return get
