"""``/tokenize``'s work, bounded as ``/embed``'s inputs are.

A text over the model's character bound (``ceiling`` times
:data:`~synapse_core.plugin.CHARS_PER_TOKEN`) is refused before it is
tokenised, and a text whose tokens do not fit the ceiling is refused with its
index, as ``/embed`` refuses it: so an answer holds at most ``--max-inputs``
times the ceiling tokens. Texts that are large together are tokenised in a
worker thread of lowered priority (:mod:`.background`), a few requests at a
time, so ``/health`` and every other request go on being answered meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import msgspec

from synapse_core import Entry, Refused
from synapse_core.frontend import OFFLOAD_CHARS, bounded, characters, give_back, shown

from .background import Background

T = TypeVar("T")
_encoder = msgspec.json.Encoder()


class Tokenizing:
    """Describes texts for ``/tokenize``; one per app, whose threads it bounds."""

    def __init__(self, threads: int = 2) -> None:
        self.threads = Background(threads, "synapse-tokenize")

    async def answer(
        self,
        entry: Entry,
        texts: Sequence[str],
        describe: Callable[[str], list[T]],
        count: Callable[[list[T]], int],
    ) -> bytes:
        """The JSON list of ``describe(text)`` for every text, refused as over
        the ceiling when a text is too long (by its characters, before
        tokenising) or when the ``count(described)`` positions of its tokens
        pass the ceiling. Encoded in the worker thread too when the texts are
        large: an answer of many tokens takes a while to write."""
        bounded(entry, texts, None, False)  # refuses a text over max_chars, unread

        def run() -> bytes:
            # Each text's tokens are written as soon as they are described:
            # only one text's pieces are ever held, and no one step of the
            # work holds the GIL for long.
            out = []
            for index, text in enumerate(texts):
                described = describe(text)
                length = count(described)
                if length > entry.ceiling:
                    raise _over(entry, index, length)
                out.append(_encoder.encode(described))
            return b"[" + b",".join(out) + b"]"

        if characters(texts) <= OFFLOAD_CHARS:
            return run()

        def offloaded() -> bytes:
            try:
                return run()
            finally:
                give_back()  # the pieces are gone: return their memory

        return await self.threads.run(offloaded)


def _over(entry: Entry, index: int, length: int) -> Refused:
    model = entry.spec.name
    return Refused(
        "over-ceiling",
        f"input {index} has {length} tokens, over the ceiling of {entry.ceiling} for model "
        f"{shown(model)}; split it into shorter texts",
        model=model,
        index=index,
    )
