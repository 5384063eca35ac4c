"""The default tokenizer: counting agrees with encoding, and pieces with
both, on any text."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from synapse_core.tokenizer import BasicTokenizer, TokenPiece, words

TOKENIZER = BasicTokenizer()
# Plain words and spaces hit the fast paths; anything else the general one.
plain = st.text(alphabet="abcXYZ019 ", max_size=40)


@given(st.one_of(plain, st.text(max_size=40)))
def test_count_is_the_number_of_ids_encode_gives(text: str) -> None:
    assert TOKENIZER.count(text) == len(TOKENIZER.encode(text)) == len(words(text))


def test_sequence_length_adds_the_special_tokens() -> None:
    assert TOKENIZER.sequence_length([7, 8, 9]) == TOKENIZER.positions(3) == 5  # CLS text SEP
    # CLS query SEP text SEP
    assert TOKENIZER.sequence_length([7, 8, 9], pair=[5, 6]) == TOKENIZER.positions(3, 2) == 8


def test_spans_locate_each_token_in_the_text() -> None:
    text = "Hello, wörld  again!"
    spans = TOKENIZER.spans(text)
    assert len(spans) == len(TOKENIZER.encode(text))
    assert [text[a:b] for a, b in spans] == ["Hello", ",", "wörld", "again", "!"]
    assert (BasicTokenizer.CLS, BasicTokenizer.SEP) == (1, 2)


@given(st.one_of(plain, st.text(max_size=40)), st.booleans())
def test_pieces_are_the_ids_each_with_its_text_or_none(text: str, special: bool) -> None:
    pieces = TOKENIZER.pieces(text, special)
    inner = pieces[1:-1] if special else pieces
    assert [p.id for p in inner] == TOKENIZER.encode(text)
    assert all(not p.special for p in inner)
    # Either every piece has its span and the text under it, or none has (ids alone).
    if any(p.start is not None for p in inner):
        assert all(p.start is not None and text[p.start : p.stop] == p.text for p in inner)
    else:
        assert all(p.text == "" and p.stop is None for p in inner)


def test_pieces_frame_a_text_with_the_special_tokens_when_asked() -> None:
    pieces = TOKENIZER.pieces("Hello, world", special=True)
    assert pieces[0] == TokenPiece(BasicTokenizer.CLS, "[CLS]", True)
    assert pieces[-1] == TokenPiece(BasicTokenizer.SEP, "[SEP]", True)
    assert pieces[1] == TokenPiece(TOKENIZER.encode("Hello")[0], "Hello", False, 0, 5)
    # Lower-casing U+0130 makes a letter and a mark of one character: no spans.
    dotted = TOKENIZER.pieces("\u0130stanbul")
    assert len(dotted) == 3 and all(p.start is None for p in dotted)
