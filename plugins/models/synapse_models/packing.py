"""Token ids framed with a model's special tokens and padded into one batch.

Ids travel without special tokens; the framing adds them as the model's own
tokenizer would (:class:`Framing`, read from its post-processor), and
sequences are right-padded to the longest, with a mask of the real positions.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import numpy as np

from .weights import F32, I64


@attrs.frozen
class Framing:
    """The special tokens a model's tokenizer frames sequences with, as its
    post-processor adds them: ``[CLS] a [SEP]`` and ``[CLS] a [SEP] b [SEP]``
    (BERT, second segment of token type 1), ``<s> a </s>`` and
    ``<s> a </s></s> b </s>`` (XLM-R, MPNet), ``a <|endoftext|>`` (a decoder
    such as Qwen3-Embedding: nothing before). An LLM reranker's pair framing
    is its prompt (:class:`PairTemplate`): prefix, between and suffix ids."""

    before: tuple[int, ...]
    after: tuple[int, ...]
    #: between the two sequences of a pair, and after the second
    between: tuple[int, ...]
    pair_after: tuple[int, ...]
    #: the token type of the second sequence and what follows it
    second_type: int = 0

    @property
    def single(self) -> int:
        """Positions the specials of one sequence take."""
        return len(self.before) + len(self.after)

    @property
    def pair(self) -> int:
        """Positions the specials of a pair take."""
        return len(self.before) + len(self.between) + len(self.pair_after)


@attrs.frozen
class PairTemplate:
    """An LLM reranker's prompt around a (query, document) pair, as texts:
    ``prefix``, ``lead + query``, ``between``, ``lead + document``, ``suffix``,
    each tokenised alone, the ids then joined (the host counts and cuts a
    pair by its ids: the query's and the document's are encoded apart).

    ``prefix`` holds the instruction (``{instruction}``, :attr:`instruction`
    by default). ``lead`` is what the prompt puts right before each text (the
    space after ``<Query>:``): it is encoded with the text, so the text's
    first token is the one the whole prompt's tokenization gives (byte-level
    BPE joins a word to the space before it). The score is
    ``logit(yes) - logit(no)`` at the last position: the rows of the tokens
    ``yes`` and ``no`` in the first tensor of ``logits`` the checkpoint holds
    (its language-model head, or the tied embedding table).
    """

    prefix: str
    between: str
    suffix: str
    lead: str = ""
    instruction: str = ""
    yes: str = "yes"
    no: str = "no"
    logits: tuple[str, ...] = ("lm_head.weight",)

    @property
    def prefix_text(self) -> str:
        """The prefix with its instruction in place."""
        return self.prefix.replace("{instruction}", self.instruction)

    def with_instruction(self, instruction: str) -> PairTemplate:
        """The same prompt with another instruction (a catalog's override)."""
        return attrs.evolve(self, instruction=instruction)


def pack(sequences: Sequence[Sequence[int]], framing: Framing) -> tuple[I64, I64, F32]:
    """Each sequence framed, right-padded to the longest: ids, token types, mask."""
    before, after = list(framing.before), list(framing.after)
    framed = [before + list(s) + after for s in sequences]
    return _padded(framed, [[0] * len(f) for f in framed])


def pack_pairs(
    query: Sequence[int], documents: Sequence[Sequence[int]], framing: Framing
) -> tuple[I64, I64, F32]:
    """``query`` paired with each document, framed as the tokenizer frames a pair."""
    first = [*framing.before, *query, *framing.between]
    framed, types = [], []
    for doc in documents:
        second = [*doc, *framing.pair_after]
        framed.append(first + second)
        types.append([0] * len(first) + [framing.second_type] * len(second))
    return _padded(framed, types)


def _padded(framed: list[list[int]], types: list[list[int]]) -> tuple[I64, I64, F32]:
    width = max(len(f) for f in framed)
    if all(len(f) == width for f in framed):  # nothing to pad (one short text, say)
        shape = (len(framed), width)
        ids, kinds = np.array(framed, dtype=np.int64), np.array(types, dtype=np.int64)
        return ids, kinds, np.ones(shape, dtype=np.float32)
    ids = np.zeros((len(framed), width), dtype=np.int64)
    kinds = np.zeros((len(framed), width), dtype=np.int64)
    mask = np.zeros((len(framed), width), dtype=np.float32)
    for row, (seq, kind) in enumerate(zip(framed, types, strict=True)):
        ids[row, : len(seq)] = seq
        kinds[row, : len(seq)] = kind
        mask[row, : len(seq)] = 1.0
    return ids, kinds, mask
