"""The default tokenizer: deterministic, dependency-free, good enough to bucket.

Lengths include the two special tokens a BERT-style encoder adds, so a text of
``n`` words occupies ``n + 2`` positions of a bucket.
"""

from __future__ import annotations

import re
import zlib
from typing import Protocol

_WORDS = re.compile(r"\w+|[^\w\s]", re.UNICODE)
VOCAB = 30_000
CLS, SEP = 1, 2
SPECIAL = 3  # ids below this are reserved


class Tokenizer(Protocol):
    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` without special tokens (empty for blank text)."""
        ...

    def sequence_length(self, ids: list[int], pair: list[int] | None = None) -> int:
        """Positions the (pair of) sequences occupy, special tokens included."""
        ...


class BasicTokenizer:
    def encode(self, text: str) -> list[int]:
        return [
            SPECIAL + zlib.crc32(word.encode("utf-8")) % (VOCAB - SPECIAL)
            for word in _WORDS.findall(text.lower())
        ]

    def sequence_length(self, ids: list[int], pair: list[int] | None = None) -> int:
        if pair is None:
            return len(ids) + 2
        return len(ids) + len(pair) + 3
