"""The default tokenizer: deterministic, dependency-free, good enough to bucket.

Lengths include the two special tokens a BERT-style encoder adds, so a text of
``n`` words occupies ``n + 2`` positions of a bucket.
"""

from __future__ import annotations

import re
import zlib
from typing import ClassVar, Protocol

import attrs

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


class CountingTokenizer(Tokenizer, Protocol):
    """A tokenizer that can also size texts without encoding them (optional).

    With both methods the host checks a large call's lengths by counting,
    before anything runs, and encodes it chunk by chunk while earlier chunks
    run on the worker; without them it encodes every input up front, once,
    and keeps the ids.

    The rule: offer ``count`` only where it costs clearly less than
    ``encode``. A count that has to encode (``len(self.encode(text))``)
    makes the host tokenise every text of a large call twice, once to
    count it and once to send it; leave ``count`` out then (and offer
    :class:`BatchTokenizer` if the tokenizer encodes many texts faster).
    """

    def count(self, text: str) -> int:
        """``len(encode(text))``, cheaper than encoding (see the class's rule)."""
        ...

    def positions(self, count: int, pair: int | None = None) -> int:
        """``sequence_length`` of sequences of ``count`` (and ``pair``) tokens."""
        ...


class BatchTokenizer(Tokenizer, Protocol):
    """A tokenizer that encodes many texts in one call faster than one by one
    (optional): in parallel, say, with the GIL released.

    The host uses it where it encodes a call's texts while planning it (a
    tokenizer that does not count, :class:`CountingTokenizer`) and the call
    has more than a few texts: they are encoded a batch at a time (up to
    ``BATCH_TEXTS`` texts or ``BATCH_CHARS`` characters, :mod:`synapse_core.plan`),
    in a worker thread when the call is large.
    A text it cannot encode fails the whole batch: the host then encodes
    that batch's texts one by one, to name the text that failed.
    """

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """``[self.encode(text) for text in texts]``, the same ids, only faster."""
        ...


class SizedTokenizer(Tokenizer, Protocol):
    """A tokenizer that can say how many token ids its model has (optional).

    With it the host refuses a token id past the vocabulary (``invalid-token``)
    before any worker sees it; without it only ids that are negative or not
    32-bit integers are refused there.
    """

    def vocab_size(self) -> int:
        """How many ids the model embeds: every id is in ``range(vocab_size())``."""
        ...


@attrs.frozen
class TokenPiece:
    """One token of a text as a model sees it: its id, its text and, for a
    token of the text (not a special one), the characters it covers,
    ``text[start:stop]``."""

    id: int
    text: str
    special: bool = False
    start: int | None = None
    stop: int | None = None


class DescribingTokenizer(Tokenizer, Protocol):
    """A tokenizer that can also say what each token is (optional).

    TEI's ``/tokenize`` route of ``synapse serve`` answers with these pieces;
    for a tokenizer without ``pieces`` it gives the ids alone.
    """

    def pieces(self, text: str, special: bool = False) -> list[TokenPiece]:
        """The tokens of ``text`` in order, one per id of ``encode(text)``,
        framed by the special tokens the model adds when ``special``."""
        ...


def bare_pieces(ids: list[int]) -> list[TokenPiece]:
    """Pieces that say only their ids: for tokens whose text cannot be told."""
    return [TokenPiece(i, "") for i in ids]


_PLAIN = b" abcdefghijklmnopqrstuvwxyz0123456789"
_PLAIN_BOTH_CASES = _PLAIN + b"ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def words(text: str) -> list[str]:
    """The lower-cased words and punctuation marks of ``text``, in order."""
    lowered = text.lower()
    # Only spaces between ASCII letters and digits: the pattern's matches are
    # exactly the space-separated runs, and splitting is far cheaper.
    if lowered.isascii() and not lowered.encode("ascii").translate(None, _PLAIN):
        return lowered.split()
    return _WORDS.findall(lowered)


class BasicTokenizer:
    #: the ids of the special tokens a sequence is framed with (``[CLS] ids [SEP]``)
    CLS: ClassVar[int] = CLS
    SEP: ClassVar[int] = SEP

    def vocab_size(self) -> int:
        """:class:`SizedTokenizer`'s size: ids below :data:`SPECIAL` are the
        special tokens, the rest are hashed words."""
        return VOCAB

    def spans(self, text: str) -> list[tuple[int, int]]:
        """The ``(start, stop)`` character span in ``text`` of each word and
        punctuation mark: one per id :meth:`encode` gives, unless lower-casing
        turns a character into a word character plus a mark (U+0130 does)."""
        return [m.span() for m in _WORDS.finditer(text)]

    def pieces(self, text: str, special: bool = False) -> list[TokenPiece]:
        """:class:`DescribingTokenizer`'s pieces: each id with its word and
        span, or the ids alone where lower-casing split a character (U+0130
        becomes a letter and a mark: two ids, one character)."""
        ids = self.encode(text)
        spans = self.spans(text)
        pieces = (
            [TokenPiece(i, text[a:b], False, a, b) for i, (a, b) in zip(ids, spans, strict=True)]
            if len(spans) == len(ids)
            else bare_pieces(ids)
        )
        if special:
            pieces = [
                TokenPiece(self.CLS, "[CLS]", True),
                *pieces,
                TokenPiece(self.SEP, "[SEP]", True),
            ]
        return pieces

    def encode(self, text: str) -> list[int]:
        crc32, span = zlib.crc32, VOCAB - SPECIAL
        if text.isascii():
            # Plain ASCII: hash the words straight from one encoded copy
            # (the same bytes each word would encode to on its own).
            data = text.lower().encode("ascii")
            if not data.translate(None, _PLAIN):
                return [SPECIAL + crc32(word) % span for word in data.split()]
        return [SPECIAL + crc32(word.encode()) % span for word in words(text)]

    def count(self, text: str) -> int:
        # Plain text (ASCII letters, digits, single spaces inside): one word
        # per space, counted without building the words.
        if (
            text.isascii()
            and text[:1] != " "
            and text[-1:] != " "
            and "  " not in text
            and not text.encode("ascii").translate(None, _PLAIN_BOTH_CASES)
        ):
            return text.count(" ") + 1 if text else 0
        return len(words(text))

    def sequence_length(self, ids: list[int], pair: list[int] | None = None) -> int:
        return self.positions(len(ids), None if pair is None else len(pair))

    def positions(self, count: int, pair: int | None = None) -> int:
        if pair is None:
            return count + 2  # CLS text SEP
        return count + pair + 3  # CLS query SEP text SEP
