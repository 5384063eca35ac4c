"""A rerank model's scores from what its worker returns (``ModelTraits.scorer``).

A cross-encoder's worker returns the logit of each (query, document) pair;
its scores are their sigmoid, as sentence-transformers' ``CrossEncoder.predict``
and TEI give them. An LLM reranker's returns ``logit(yes) - logit(no)``,
whose sigmoid is the model card's ``softmax([no, yes])[yes]``. Any other
scorer's values are its scores as they are.
"""

from __future__ import annotations

import math

from .transport import ModelTraits


def sigmoid(x: float) -> float:
    # Split by sign: exp of a large positive argument would overflow.
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def scores_of(traits: ModelTraits, raw: list[float]) -> list[float]:
    """The scores of a rerank model whose worker returned ``raw``."""
    if traits.scorer in ("cross-encoder", "llm-reranker"):
        return [sigmoid(logit) for logit in raw]
    return raw
