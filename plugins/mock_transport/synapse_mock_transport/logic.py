"""The mock model: the kit's hash model with the splitmix64 hash."""

from __future__ import annotations

from synapse_core.plugin import SPLITMIX64


def embed_tokens(tokens: list[int], dims: int) -> list[float]:
    """Feature hashing of token ids into ``dims`` floats, L2-normalised.

    Each token sets eight signed features, so texts sharing words score
    high and unrelated texts score near (not exactly) zero, like a real model.
    """
    return SPLITMIX64.embed(tokens, dims)
