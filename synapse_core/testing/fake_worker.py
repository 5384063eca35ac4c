"""The fake transport's worker: deterministic rows from token ids, nothing more.

The core's own tests serve through it, with no plugin installed. It is a
:class:`~synapse_core.worker.ModelWorker` like any transport's, so the kit
supplies the protocol, the fault knobs (``faults``) and the frame trace
(``trace``); see :class:`FakeOptions` for the rest of its catalog options.
"""

from __future__ import annotations

import math
import zlib

import attrs

from ..worker import ModelWorker, WorkerOptions, bucket_sizes, positive


@attrs.frozen
class FakeOptions(WorkerOptions):
    """``[models.options]`` of a fake model, plus the kit's ``faults`` and ``trace``."""

    buckets: tuple[int, ...] = attrs.field(
        default=(16, 32, 64, 128, 256, 512), validator=bucket_sizes
    )
    dims: int = attrs.field(default=64, validator=positive)
    max_batch: int = attrs.field(default=32, validator=positive)


def fake_vector(tokens: list[int], dims: int) -> list[float]:
    """A unit vector that depends only on ``tokens`` (never on batch mates)."""
    vec = [0.0] * dims
    for position, token in enumerate(tokens):
        digest = zlib.crc32(token.to_bytes(8, "little", signed=True))
        vec[digest % dims] += 1.0 if digest & 0x100 else -1.0
        vec[(digest >> 9) % dims] += 0.5 / (1 + position)
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


def fake_score(query: list[int], document: list[int], dims: int) -> float:
    """A document's rerank score: the dot product of the two fake vectors."""
    q, d = fake_vector(query, dims), fake_vector(document, dims)
    return sum(a * b for a, b in zip(q, d, strict=True))


class FakeWorker(ModelWorker):
    options_type = FakeOptions
    implementation = "synapse-core-fake"
    version = "1"

    def load(self, options: FakeOptions) -> None:
        self.buckets, self.dims, self.max_batch = options.buckets, options.dims, options.max_batch
        self.identity = f"fake:{self.package}:d{options.dims}"

    def embed(self, batch: list[list[int]]) -> list[list[float]]:
        return [fake_vector(seq, self.dims) for seq in batch]

    def rerank(self, query: list[int], batch: list[list[int]]) -> list[float]:
        return [fake_score(query, seq, self.dims) for seq in batch]
