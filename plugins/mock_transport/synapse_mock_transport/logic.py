"""The mock model: deterministic feature-hashing embeddings of token ids."""

from __future__ import annotations

import functools
import math

FEATURES_PER_TOKEN = 8


@functools.lru_cache(maxsize=1 << 16)
def _features(token: int) -> tuple[tuple[int, float], ...]:
    """A token's hashed features: (index seed, sign) pairs from a splitmix64 walk."""
    out = []
    state = token & 0xFFFFFFFFFFFFFFFF
    for _ in range(FEATURES_PER_TOKEN):
        state = (state + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        z ^= z >> 31
        out.append((z >> 1, 1.0 if z & 1 else -1.0))
    return tuple(out)


def embed_tokens(tokens: list[int], dims: int) -> list[float]:
    """Feature hashing of token ids into ``dims`` floats, L2-normalised.

    Each token sets several signed features, so texts sharing words score
    high and unrelated texts score near (not exactly) zero, like a real model.
    """
    vec = [0.0] * dims
    for token in tokens:
        for seed, sign in _features(token):
            vec[seed % dims] += sign
    norm = math.sqrt(sum(v * v for v in vec))
    if norm == 0.0:
        vec[0], norm = 1.0, 1.0
    return [v / norm for v in vec]
