"""Token arrays on OpenAI's routes: tiktoken ids, turned back into text.

By OpenAI's API a token array on ``/v1/embeddings`` holds tiktoken ids, and
clients that pre-tokenise for OpenAI send them (LangChain's
``OpenAIEmbeddings`` does by default, in cl100k_base). Read as the model's
own ids they would give wrong vectors, so each array is decoded with the
model's ``tiktoken_encoding`` and the text goes to the host, which tokenises
it with the model's own tokenizer: the same vector as sending the text.

tiktoken fetches an encoding's file on first use (``TIKTOKEN_CACHE_DIR``
keeps it); that happens once per encoding, in a thread, off the event loop.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import anyio.to_thread

from .errors import HTTPError
from .schemas import ErrorBody

#: what a client that sent token ids can do instead
ADVICE = "send the texts instead (LangChain's OpenAIEmbeddings: check_embedding_ctx_length=False)"

#: the largest id a token array may hold: tiktoken's ids are 32-bit
MAX_ID = 2**32 - 1
#: characters of a loading error's message kept in the answer
REASON_CHARS = 200

_lock = threading.Lock()
_loaded: dict[str, Any] = {}


async def decoded(
    inputs: list[str | list[int]], encoding: str, field: str, flat: bool
) -> list[str | list[int]]:
    """``inputs`` with every token array decoded to its text. ``flat``: the
    one input was the bare array ``field`` itself."""
    if all(isinstance(given, str) for given in inputs):
        return inputs
    # An id no encoding has is the client's mistake whether or not the
    # encoding's file can be loaded: said first, as invalid-token.
    for index, given in enumerate(inputs):
        if not isinstance(given, str):
            for position, token in enumerate(given):
                if not 0 <= token <= MAX_ID:
                    where = field if flat else f"{field}[{index}]"
                    raise _bad_token(token, position, index, where, encoding)
    tokens = _loaded.get(encoding) or await anyio.to_thread.run_sync(_load, encoding)
    out: list[str | list[int]] = []
    for index, given in enumerate(inputs):
        if isinstance(given, str):
            out.append(given)
        else:
            out.append(
                _text(tokens, encoding, given, index, field if flat else f"{field}[{index}]")
            )
    return out


def _load(encoding: str) -> Any:
    """The tiktoken encoding, loaded once; a 422 saying why it cannot be."""
    with _lock:
        found = _loaded.get(encoding)
        if found is not None:
            return found
        try:
            import tiktoken
        except ImportError:
            raise unavailable(
                "token arrays on this route are tiktoken ids, and tiktoken is not installed "
                "on the server (pip install tiktoken)"
            ) from None
        try:
            found = tiktoken.get_encoding(encoding)
        except Exception as exc:
            raise unavailable(
                f"token arrays on this route are tiktoken ids, and the server cannot load "
                f"the tiktoken encoding {encoding!r} ({type(exc).__name__}: {_short(exc)}); "
                "its file "
                "is fetched on first use, or read from TIKTOKEN_CACHE_DIR"
            ) from None
        _loaded[encoding] = found
        return found


def _short(exc: Exception) -> str:
    """``exc``'s message, cut (a failed download's runs to a page of urllib3)."""
    text = " ".join(str(exc).split())
    return text if len(text) <= REASON_CHARS else f"{text[:REASON_CHARS]}..."


def _text(tokens: Any, encoding: str, ids: Sequence[int], index: int, field: str) -> str:
    """The text of ``ids``; ``invalid-token`` naming the first id ``encoding`` lacks."""
    try:
        text: str = tokens.decode(ids)
    except Exception:  # an id out of range (OverflowError) or unassigned (KeyError)
        for position, token in enumerate(ids):
            try:
                tokens.decode_single_token_bytes(token)
            except Exception:
                raise _bad_token(token, position, index, field, encoding) from None
        raise
    return text


def _bad_token(token: int, position: int, index: int, field: str, encoding: str) -> HTTPError:
    return HTTPError(
        422,
        ErrorBody(
            error=(
                f"input {index}: token id {token} at position {position} is not a token of "
                f"the tiktoken encoding {encoding!r}, which this route's token arrays are in; "
                "give text, or ids of that encoding"
            ),
            error_type="invalid-token",
            index=index,
            field=f"{field}[{position}]",
        ),
    )


def unavailable(reason: str) -> HTTPError:
    return HTTPError(
        422,
        ErrorBody(error=f"{reason}; {ADVICE}", error_type="tiktoken-unavailable"),
    )
