"""The model's own tokenizer (Hugging Face ``tokenizers``), for the host and workers.

Truncation and padding stored in ``tokenizer.json`` are switched off: the host
must see every token to refuse over-long input, and buckets do the padding.
Lengths count ``[CLS]`` and ``[SEP]``, the positions the encoder sees.
"""

from __future__ import annotations

import threading
from pathlib import Path

from synapse_core.plugin import TokenPiece

from .errors import ModelFilesError


class HFTokenizer:
    """Implements the plugin API's ``CountingTokenizer``, ``DescribingTokenizer``
    and ``SizedTokenizer``.

    The file is read on first use, so listing a catalog never touches it.
    A rerank pair counts the query's tokens and the document's together, as
    every transport does (the worker kit's one shape rule), although this
    bi-encoder embeds them separately: longer pairs are refused, never cut.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._inner: object | None = None

    def load(self) -> object:
        """The ``tokenizers.Tokenizer``; raises :class:`ModelFilesError` naming the file."""
        with self._lock:
            if self._inner is None:
                self._inner = load_tokenizer(self.path)
            return self._inner

    def encode(self, text: str) -> list[int]:
        ids: list[int] = self.load().encode(text, add_special_tokens=False).ids  # type: ignore[attr-defined]
        return ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        encodings = self.load().encode_batch(texts, add_special_tokens=False)  # type: ignore[attr-defined]
        return [e.ids for e in encodings]

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def vocab_size(self) -> int:
        """``SizedTokenizer``'s size: the host refuses ids past it, so a worker
        never looks one up (``check_fits`` holds it equal to the weights' rows)."""
        size: int = self.load().get_vocab_size()  # type: ignore[attr-defined]
        return size

    def pieces(self, text: str, special: bool = False) -> list[TokenPiece]:
        """Each token's id, the characters of ``text`` it stands for (its
        word piece before lower-casing and accent stripping), and their span;
        a special token by its vocabulary entry, with no span."""
        encoding = self.load().encode(text, add_special_tokens=special)  # type: ignore[attr-defined]
        return [
            TokenPiece(i, token, True) if mask else TokenPiece(i, text[a:b], False, a, b)
            for i, token, (a, b), mask in zip(
                encoding.ids,
                encoding.tokens,
                encoding.offsets,
                encoding.special_tokens_mask,
                strict=True,
            )
        ]

    def sequence_length(self, ids: list[int], pair: list[int] | None = None) -> int:
        return self.positions(len(ids), None if pair is None else len(pair))

    def positions(self, count: int, pair: int | None = None) -> int:
        return count + (pair or 0) + 2  # [CLS] text [SEP]

    def special_ids(self) -> tuple[int, int]:
        """The ids of ``[CLS]`` and ``[SEP]``."""
        inner = self.load()
        cls_id = inner.token_to_id("[CLS]")  # type: ignore[attr-defined]
        sep_id = inner.token_to_id("[SEP]")  # type: ignore[attr-defined]
        if cls_id is None or sep_id is None:
            raise ModelFilesError(
                str(self.path), "has no [CLS] or [SEP] token: not a BERT tokenizer"
            )
        return int(cls_id), int(sep_id)


def check_fits(tokenizer: HFTokenizer, vocab_rows: int) -> None:
    """Refuse a tokenizer whose ids the weights cannot embed (another model's)."""
    size = tokenizer.load().get_vocab_size()  # type: ignore[attr-defined]
    if size != vocab_rows:
        raise ModelFilesError(
            str(tokenizer.path),
            f"has {size} tokens but the weights embed {vocab_rows}: it belongs to another "
            "model; use the model's own tokenizer.json",
        )
    tokenizer.special_ids()


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
