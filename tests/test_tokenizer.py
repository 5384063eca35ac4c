"""The default tokenizer: counting agrees with encoding, on any text."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from synapse_core.tokenizer import BasicTokenizer, words

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
