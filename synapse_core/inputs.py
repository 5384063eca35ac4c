"""Checks of one input of a call before it is tokenised or sent: text UTF-8
can carry, token ids the model can look up; and the error of a tokenizer
that failed on one."""

from __future__ import annotations

import re
from collections.abc import Sequence

from .errors import PluginError, Refused
from .tokenizer import Tokenizer

#: a UTF-16 surrogate on its own: a str can hold one, UTF-8 cannot encode it
_SURROGATE = re.compile("[\ud800-\udfff]")


def tokenizer_failed(model: str, what: str, exc: Exception) -> PluginError:
    return PluginError(f"the tokenizer of model {model!r} failed on {what}: {exc!r}")


#: token ids reach workers as 32-bit integers at most (a numpy or device
#: table index); a larger int fails on the wire or inside the worker
TOKEN_ID_LIMIT = 2**31


def token_id_limit(model: str, tokenizer: Tokenizer) -> int:
    """One past the largest token id the model takes: its vocabulary's size
    where the tokenizer tells it (:class:`~synapse_core.tokenizer.SizedTokenizer`),
    else the 32-bit bound."""
    size = getattr(tokenizer, "vocab_size", None)
    if size is None:
        return TOKEN_ID_LIMIT
    try:
        limit = int(size())
    except Exception as exc:
        raise tokenizer_failed(model, "its vocabulary size", exc) from exc
    return min(limit, TOKEN_ID_LIMIT)


def invalid_token(
    model: str, ids: Sequence[object], what: str, index: int, limit: int
) -> Refused | None:
    """The refusal of token ids ``ids`` if one is not an int in ``range(limit)``."""
    if all(type(i) is int for i in ids) and (
        not ids or (min(ids) >= 0 and max(ids) < limit)  # type: ignore[type-var,operator]
    ):
        return None
    for position, token in enumerate(ids):
        if type(token) is not int:
            kind = "None" if token is None else f"of type {type(token).__name__}"
            problem = f"is {kind}, not an integer"
        elif token < 0:
            problem = "is negative"
        elif token >= limit:
            problem = (
                f"is past the vocabulary of model {model!r} (ids 0 to {limit - 1})"
                if limit < TOKEN_ID_LIMIT
                else "is not a 32-bit integer"
            )
        else:
            continue
        return Refused(
            "invalid-token",
            f"{what}: token id {token!r} at position {position} {problem}; give text, "
            "or ids of the model's own tokenizer",
            model=model,
            index=index,
        )
    return None  # pragma: no cover - the check above found a bad id


def has_surrogate(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate, which UTF-8 cannot carry."""
    return _SURROGATE.search(text) is not None


def invalid_text(model: str, value: object, what: str, index: int | None) -> Refused | None:
    """The refusal of ``value`` if it is not text UTF-8 can carry (else ``None``)."""
    if isinstance(value, str):
        found = _SURROGATE.search(value)
        if found is None:
            return None
        problem = (
            f"holds a lone surrogate (U+{ord(found.group()):04X}) at character {found.start()}, "
            "which is not valid Unicode; decode its bytes with errors='replace' or fix its source"
        )
    else:
        kind = "None" if value is None else f"of type {type(value).__name__}"
        problem = f"is {kind}, not text; give a string"
    return Refused("invalid-text", f"{what} {problem}", model=model, index=index)
