"""The model's own tokenizer (Hugging Face ``tokenizers``), for the host and workers.

Truncation and padding stored in ``tokenizer.json`` are switched off: the host
must see every token to refuse over-long input, and buckets do the padding.
Lengths count the special tokens (``[CLS]`` and ``[SEP]``, or ``<s>`` and
``</s>``), the positions the encoder sees; which ones and where comes from the
tokenizer's own post-processor (:func:`framing_of`).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from synapse_core.plugin import TokenPiece

from .errors import ModelFilesError
from .packing import Framing, PairTemplate

#: texts this long or longer are tokenised with the GIL released (the cost of
#: letting go of it is tens of microseconds, a small part of theirs)
RELEASE_GIL_CHARS = 512

#: a text's tokens by column: ids, texts, special flags, starts, stops
PieceColumns = tuple[list[int], list[str], list[bool], list[int | None], list[int | None]]


class HFTokenizer:
    """Implements the plugin API's ``BatchTokenizer``, ``DescribingTokenizer``
    and ``SizedTokenizer``, and not ``CountingTokenizer``: counting a text's
    tokens costs as much as encoding it, so the host encodes every text once
    while planning (many at a time, with :meth:`encode_batch`) and keeps the ids.

    The file is read on first use (the CPU transport does so when its
    catalog is read, to refuse a malformed file there).
    A rerank pair counts the query's tokens and the document's together, as
    every transport does (the worker kit's one shape rule): a cross-encoder
    (``pairs``) with the specials of a pair, ``[CLS] q [SEP] d [SEP]`` or
    ``<s> q </s></s> d </s>``, which it encodes; a bi-encoder with those of
    one sequence, although it embeds the two separately.

    Texts lose their surrounding whitespace before they are encoded unless
    ``strip`` is false (:func:`tokenizer_of` asks the model's family).
    """

    def __init__(
        self,
        path: Path,
        pairs: bool = False,
        template: PairTemplate | None = None,
        start: bool = True,
        strip: bool = True,
    ) -> None:
        self.path = path
        self.pairs = pairs
        #: an LLM reranker's prompt: a pair is framed by it (:meth:`framing`),
        #: and every text is encoded after its ``lead``
        self.template = template
        #: the model reads its first token (an encoder's ``[CLS]``): its
        #: tokenizer must start a sequence with a special token
        self.start = start
        #: texts are stripped before encoding (sentence-transformers before
        #: version 6 did); a decoder's are encoded as given, as the model
        #: card's code, TEI and sentence-transformers 6 encode them
        self.strip = strip or template is not None
        self._lead = template.lead if template is not None else ""
        self._lock = threading.Lock()
        self._inner: object | None = None
        self._framing: Framing | None = None

    def load(self) -> object:
        """The ``tokenizers.Tokenizer``; raises :class:`ModelFilesError` naming the file."""
        with self._lock:
            if self._inner is None:
                inner = load_tokenizer(self.path)
                if self.template is None:
                    self._framing = framing_of(inner, self.path, self.start)
                else:
                    self._framing = template_framing(inner, self.template)
                self._inner = inner
            return self._inner

    def framing(self) -> Framing:
        """The special tokens around a sequence and a pair, from the post-processor."""
        if self._framing is None:
            self.load()
        assert self._framing is not None
        return self._framing

    def encode(self, text: str) -> list[int]:
        # Stripped first, as sentence-transformers strips every text (it
        # matters to tokenizers that keep spaces as tokens, XLM-R's does).
        stripped = text.strip() if self.strip else text
        if self._lead and not stripped:
            return []  # blank stays blank (the host refuses it), lead or not
        ids: list[int] = self._encoding(self._lead + stripped, False).ids
        return ids

    def _encoding(self, text: str, special: bool) -> Any:
        """The ``tokenizers`` encoding of ``text``. ``Tokenizer.encode`` holds
        the GIL throughout (milliseconds for a long text), while
        ``encode_batch`` lets go of it: a long text is encoded as a batch of
        one, so while a worker thread tokenises it the event loop keeps
        serving."""
        inner: Any = self.load()
        if len(text) < RELEASE_GIL_CHARS:
            return inner.encode(text, add_special_tokens=special)
        return inner.encode_batch([text], add_special_tokens=special)[0]

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """:meth:`encode` of each text, with the GIL released and on every
        core (``tokenizers``' own threads)."""
        stripped = [text.strip() for text in texts] if self.strip else list(texts)
        if self._lead:
            stripped = [self._lead + text if text else text for text in stripped]
        encodings = self.load().encode_batch(stripped, add_special_tokens=False)  # type: ignore[attr-defined]
        return [e.ids for e in encodings]

    def token_id(self, token: str) -> int:
        """The id of the vocabulary entry ``token``; :class:`ModelFilesError` if there is none."""
        found = self.load().token_to_id(token)  # type: ignore[attr-defined]
        if found is None:
            raise ModelFilesError(
                str(self.path), f"has no token {token!r}, which the model's score reads"
            )
        return int(found)

    def vocab_size(self) -> int:
        """``SizedTokenizer``'s size: the host refuses ids past it, so a worker
        never looks one up (``check_fits`` holds it equal to the weights' rows)."""
        size: int = self.load().get_vocab_size()  # type: ignore[attr-defined]
        return size

    def pieces(self, text: str, special: bool = False) -> list[TokenPiece]:
        """Each token's id, the characters of ``text`` it stands for (its
        word piece before lower-casing and accent stripping), and their span;
        a special token by its vocabulary entry, with no span."""
        return list(map(TokenPiece, *self.piece_columns(text, special)))

    def piece_columns(self, text: str, special: bool = False) -> PieceColumns:
        """:meth:`pieces` as columns (ids, texts, special flags, starts,
        stops), made without an object per token: a long ``/tokenize``
        answer is built from them while holding the GIL as little as it can."""
        stripped = text.strip() if self.strip else text
        lead = (
            len(text) - len(text.lstrip()) if self.strip else 0
        )  # spans count from the text as given
        # A template's lead is encoded with the text (see encode) but is none of its characters.
        extra = len(self._lead) if stripped else 0
        encoding = self._encoding(self._lead[:extra] + stripped, special)
        offsets: list[tuple[int, int]] = [
            (max(a - extra, 0), max(b - extra, 0)) for a, b in encoding.offsets
        ]
        ids: list[int] = encoding.ids
        texts = [stripped[a:b] for a, b in offsets]
        starts: list[int | None] = [a + lead for a, _ in offsets]
        stops: list[int | None] = [b + lead for _, b in offsets]
        mask: list[int] = encoding.special_tokens_mask
        flags = list(map(bool, mask))
        if special:
            names: list[str] = encoding.tokens
            for index in [i for i, m in enumerate(mask) if m]:
                texts[index], starts[index], stops[index] = names[index], None, None
        return ids, texts, flags, starts, stops

    def sequence_length(self, ids: list[int], pair: list[int] | None = None) -> int:
        return self.positions(len(ids), None if pair is None else len(pair))

    def positions(self, count: int, pair: int | None = None) -> int:
        framing = self._framing or self.framing()
        if pair is None:
            return count + framing.single
        return count + pair + (framing.pair if self.pairs else framing.single)


def tokenizer_of(
    path: Path,
    pairs: bool = False,
    template: PairTemplate | None = None,
    decoder: bool = False,
    strip: bool = True,
) -> HFTokenizer:
    """The tokenizer at ``path`` as a model of a folder's layout frames and
    encodes texts (``Layout.cross_encoder``, ``.template``, ``.causal`` and
    ``.strips_texts``): pairs for a cross-encoder, an LLM reranker's prompt,
    and for a decoder a framing with no start token and texts encoded as
    given; ``strip`` false keeps a text's surrounding spaces (a family whose
    tokenizer makes tokens of them)."""
    return HFTokenizer(path, pairs, template, start=not decoder, strip=strip and not decoder)


def check_fits(tokenizer: HFTokenizer, vocab_rows: int, padded: bool = False) -> None:
    """Refuse a tokenizer whose ids the weights cannot embed (another model's).

    ``padded``: the family pads its embedding table past the vocabulary (to a
    multiple of 64, say), so the tokenizer may have fewer tokens than rows."""
    size = tokenizer.load().get_vocab_size()  # type: ignore[attr-defined]
    if size > vocab_rows or (size < vocab_rows and not padded):
        raise ModelFilesError(
            str(tokenizer.path),
            f"has {size} tokens but the weights embed {vocab_rows}: it belongs to another "
            "model; use the model's own tokenizer.json",
        )
    tokenizer.framing()


def framing_of(inner: object, path: Path, start: bool = True) -> Framing:
    """Where the tokenizer's post-processor puts its special tokens, found by
    framing one token, and a pair of them, as the model's own tokenizer does.

    ``start``: the model reads a sequence's first token (an encoder's
    ``[CLS]``), so the framing must begin with a special token; a decoder's
    (``start`` false) may frame with nothing before (``a <|endoftext|>``),
    or with nothing at all."""
    tok: Any = inner
    try:
        one = tok.encode("a", add_special_tokens=False)
        single = tok.post_process(one, None, True)
        pair = tok.post_process(one, tok.encode("a", add_special_tokens=False), True)
    except Exception as exc:
        raise ModelFilesError(str(path), f"cannot frame a sequence: {exc}") from None
    n = len(one.ids)
    slots = _slots(single.ids, single.special_tokens_mask, n, 1)
    pairs = _slots(pair.ids, pair.special_tokens_mask, n, 2)
    if n == 0 or slots is None or pairs is None or (start and not slots[0]):
        raise ModelFilesError(
            str(path),
            "its post-processor does not frame sequences as a BERT-family encoder needs "
            "(a start token, the text, an end token); use the model's own tokenizer.json",
        )
    second = pair.type_ids[len(pairs[0]) + n + len(pairs[1])]
    return Framing(
        before=tuple(slots[0]),
        after=tuple(slots[1]),
        between=tuple(pairs[1]),
        pair_after=tuple(pairs[2]),
        second_type=int(second),
    )


def template_framing(inner: object, template: PairTemplate) -> Framing:
    """An LLM reranker's framing: its prompt's pieces, each tokenised alone
    (one sequence alone is framed by the prefix)."""
    tok: Any = inner

    def ids(text: str) -> tuple[int, ...]:
        return tuple(tok.encode(text, add_special_tokens=False).ids)

    prefix, between, suffix = template.prefix_text, template.between, template.suffix
    return Framing(before=ids(prefix), after=(), between=ids(between), pair_after=ids(suffix))


def _slots(ids: list[int], special: list[int], n: int, texts: int) -> list[list[int]] | None:
    """The special tokens before, between and after ``texts`` runs of ``n``
    text tokens each (``texts + 1`` slots, any of them empty), or ``None``
    when the sequence is not framed so."""
    slots: list[list[int]] = []
    at = 0
    for _ in range(texts):
        slot = []
        while at < len(ids) and special[at]:
            slot.append(ids[at])
            at += 1
        slots.append(slot)
        if at + n > len(ids) or any(special[at : at + n]):
            return None
        at += n
    if not all(special[at:]):
        return None
    slots.append(list(ids[at:]))
    return slots


def load_tokenizer(path: Path) -> object:
    try:
        from tokenizers import Tokenizer
    except ImportError:  # pragma: no cover - a dependency of synapse-cpu
        raise ModelFilesError("tokenizers", "not installed; pip install tokenizers") from None
    try:
        inner = Tokenizer.from_file(str(path))
    except Exception as exc:
        raise ModelFilesError(
            str(path), f"is not a Hugging Face tokenizers file ({exc}); use the model's own"
        ) from None
    inner.no_truncation()
    inner.no_padding()
    return inner
