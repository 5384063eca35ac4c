"""A stand-in model: token ids hashed into a unit vector, for tests and mocks.

Each token adds a few signed features to a ``dims``-wide vector, which is then
L2-normalised; a rerank score is the dot product of the query's vector and
the document's. Texts sharing tokens score high and unrelated texts near zero,
like a real model, with no weights and no compute to speak of. A row depends
only on its own tokens, never on its batch mates or its bucket.

The core's fake transport, the mock transport and the simulated Neural
Engine all run this one model. Each keeps its own hash of a token
(:class:`HashScheme`), so each keeps the exact vectors its tests and
documentation show: :data:`CRC32_POSITIONAL` (the fake: the order of tokens
counts), :data:`SPLITMIX64` (the mock) and :data:`MULTIPLICATIVE` (the
simulated device).
"""

from __future__ import annotations

import functools
import math
import zlib
from collections.abc import Callable, Iterable, Sequence
from typing import ClassVar

import attrs

from .faults import WorkerOptions
from .model import ModelWorker
from .options import bucket_sizes, positive

#: a token's ``(index seed, weight)`` pairs, ``features(token)`` or, for a
#: positional scheme, ``features(token, position)``: each weight is added at
#: ``seed % dims``, in the order given (float sums depend on it)
Features = Callable[..., Sequence[tuple[int, float]]]


@attrs.frozen
class HashScheme:
    """How a token's features are hashed, and what a vector whose features
    all cancel (an empty sequence's) becomes."""

    features: Features
    #: the features take the token's position too (then token order counts)
    positional: bool = False
    #: True: the first unit vector; False: the zero vector
    unit_when_empty: bool = True

    def embed(self, tokens: Sequence[int], dims: int) -> list[float]:
        """The unit vector of ``tokens``."""
        vec = [0.0] * dims
        features = self.features
        if self.positional:
            for position, token in enumerate(tokens):
                for seed, weight in features(token, position):
                    vec[seed % dims] += weight
        else:  # one call less per token: the mock's and the device's rows are hot in benchmarks
            for token in tokens:
                for seed, weight in features(token):
                    vec[seed % dims] += weight
        norm = math.sqrt(sum(v * v for v in vec))
        if norm == 0.0:
            if not self.unit_when_empty:
                return vec
            vec[0], norm = 1.0, 1.0
        return [v / norm for v in vec]

    def rerank(
        self, query: Sequence[int], documents: Iterable[Sequence[int]], dims: int
    ) -> list[float]:
        """Each document's score: the dot product of its vector with the query's."""
        q = self.embed(query, dims)
        return [sum(a * b for a, b in zip(q, self.embed(d, dims), strict=True)) for d in documents]


@functools.lru_cache(maxsize=1 << 16)
def _crc32(token: int) -> tuple[int, float, int]:
    digest = zlib.crc32(token.to_bytes(8, "little", signed=True))
    return digest, 1.0 if digest & 0x100 else -1.0, digest >> 9


def _crc32_positional(token: int, position: int) -> tuple[tuple[int, float], ...]:
    """A CRC-32 of the token sets a signed feature, and a second one weighted
    by the token's position, so the same tokens in another order differ."""
    digest, sign, second = _crc32(token)
    return (digest, sign), (second, 0.5 / (1 + position))


@functools.lru_cache(maxsize=1 << 16)
def _splitmix64(token: int) -> tuple[tuple[int, float], ...]:
    """Eight signed features from a splitmix64 walk seeded by the token."""
    out = []
    state = token & 0xFFFFFFFFFFFFFFFF
    for _ in range(8):
        state = (state + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        z ^= z >> 31
        out.append((z >> 1, 1.0 if z & 1 else -1.0))
    return tuple(out)


@functools.lru_cache(maxsize=1 << 16)
def _multiplicative(token: int) -> tuple[tuple[int, float], ...]:
    """One signed feature from Knuth's multiplicative hash of the token."""
    h = (token * 2654435761) & 0xFFFFFFFF
    return ((h, 1.0 if (h >> 16) & 1 else -1.0),)


#: the core's fake transport: order-sensitive; all-cancelled features stay zero
CRC32_POSITIONAL = HashScheme(_crc32_positional, positional=True, unit_when_empty=False)
#: the mock transport: eight features per token, order-insensitive
SPLITMIX64 = HashScheme(_splitmix64)
#: the simulated Neural Engine: one feature per token, order-insensitive
MULTIPLICATIVE = HashScheme(_multiplicative)


@attrs.frozen
class HashOptions(WorkerOptions):
    """``[models.options]`` of a hash model, plus the kit's ``faults`` and ``trace``."""

    buckets: tuple[int, ...] = attrs.field(
        default=(16, 32, 64, 128, 256, 512), validator=bucket_sizes
    )
    dims: int = attrs.field(default=64, validator=positive)
    max_batch: int = attrs.field(default=32, validator=positive)


class HashWorker(ModelWorker):
    """A complete worker over :class:`HashOptions`: set :attr:`scheme`,
    :attr:`identity_format`, ``implementation`` and ``version``."""

    options_type = HashOptions
    scheme: ClassVar[HashScheme] = SPLITMIX64
    #: the worker's identity, formatted with its ``package`` and ``dims``
    identity_format: ClassVar[str] = "hash:{package}:d{dims}"

    def load(self, options: HashOptions) -> None:
        self.buckets, self.dims, self.max_batch = options.buckets, options.dims, options.max_batch
        self.identity = self.identity_format.format(package=self.package, dims=options.dims)

    def embed(self, batch: list[list[int]]) -> list[list[float]]:
        return [self.scheme.embed(seq, self.dims) for seq in batch]

    def rerank(self, query: list[int], batch: list[list[int]]) -> list[float]:
        return self.scheme.rerank(query, batch, self.dims)
