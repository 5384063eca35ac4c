"""A body whose JSON escapes a lone UTF-16 surrogate (``"\\ud800"``): valid
JSON, but not text UTF-8 can carry. msgspec refuses it with a message about
a truncated body; this finds the string instead, so the answer is the
``invalid-text`` refusal the host would give, naming the input."""

from __future__ import annotations

import json
import re

from .errors import HTTPError
from .schemas import UNSET, ErrorBody

_SURROGATE = re.compile("[\ud800-\udfff]")
#: the body fields that hold a request's inputs, as lists indexed like them
INPUT_FIELDS = frozenset({"input", "inputs", "texts", "documents"})


def lone_surrogate(body: bytes) -> HTTPError | None:
    """``invalid-text`` naming the first string of ``body`` with a lone
    surrogate (its input ``index`` where it is one), or ``None`` when the body
    holds no such string (or is not JSON at all)."""
    if b"\\u" not in body:  # a surrogate can only be written escaped
        return None
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return None
    found = _first(value, "$")
    if found is None:
        return None
    path, text, at = found
    index = _input_index(path)
    what = f"input {index}" if index is not None else path
    return HTTPError(
        422,
        ErrorBody(
            error=(
                f"{what} ({path}) holds a lone surrogate (U+{ord(text[at]):04X}) at character "
                f"{at}, which is not valid Unicode; decode its bytes with errors='replace' "
                "or fix its source"
            ),
            error_type="invalid-text",
            field=path,
            index=UNSET if index is None else index,
        ),
    )


def _first(value: object, path: str) -> tuple[str, str, int] | None:
    """The path of the first string under ``value`` with a lone surrogate,
    the string, and the surrogate's character index."""
    if isinstance(value, str):
        match = _SURROGATE.search(value)
        return None if match is None else (path, value, match.start())
    if isinstance(value, list):
        items = ((f"{path}[{i}]", v) for i, v in enumerate(value))
    elif isinstance(value, dict):
        items = ((f"{path}.{k}", v) for k, v in value.items())
    else:
        return None
    for inner_path, inner in items:
        found = _first(inner, inner_path)
        if found is not None:
            return found
    return None


_INPUT = re.compile(r"^\$\.(?P<field>\w+)\[(?P<index>\d+)\]")


def _input_index(path: str) -> int | None:
    """The input index in ``path`` (``$.input[2]`` is input 2; ``$.input``
    alone is input 0, a single text)."""
    match = _INPUT.match(path)
    if match is not None and match["field"] in INPUT_FIELDS:
        return int(match["index"])
    if path.removeprefix("$.") in INPUT_FIELDS:
        return 0
    return None
