"""``/tokenize``'s answer built from a tokenizer's columns (``piece_columns``,
as the CPU lane's tokenizer gives them) is the answer built from its pieces,
byte for byte: the same ids, texts, flags and UTF-8 byte spans."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import msgspec
import pytest

from synapse_core.plugin import BasicTokenizer, TokenPiece
from synapse_http.routes_tei import TokenRow, _tokens


class ByPieces:
    def __init__(self) -> None:
        self.basic = BasicTokenizer()

    def encode(self, text: str) -> list[int]:
        return self.basic.encode(text)

    def sequence_length(self, ids: list[int], pair: list[int] | None = None) -> int:
        return self.basic.sequence_length(ids, pair)

    def pieces(self, text: str, special: bool = False) -> list[TokenPiece]:
        return self.basic.pieces(text, special)


class ByColumns(ByPieces):
    def piece_columns(self, text: str, special: bool = False) -> tuple[list[Any], ...]:
        pieces = self.pieces(text, special)
        return tuple(
            [getattr(p, name) for p in pieces]
            for name in ("id", "text", "special", "start", "stop")
        )


TEXTS = ["Hello, world", "naïve café, déjà vu!", "İstanbul", "  lead and trail  "]


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("special", [True, False])
def test_rows_from_columns_encode_as_tokens_from_pieces(text: str, special: bool) -> None:
    rows = _tokens(SimpleNamespace(tokenizer=ByColumns()), text, special)  # type: ignore[arg-type]
    tokens = _tokens(SimpleNamespace(tokenizer=ByPieces()), text, special)  # type: ignore[arg-type]
    assert rows and all(type(row) is TokenRow for row in rows)
    assert msgspec.json.encode(rows) == msgspec.json.encode(tokens)
    if text == TEXTS[1]:  # spans count UTF-8 bytes, not characters
        assert [row.stop for row in rows if not row.special][-1] == len(text.encode())
