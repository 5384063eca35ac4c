"""The mock worker: a :class:`~synapse_core.plugin.ModelWorker` over the mock model.

The transport starts it as ``synapse_mock_transport.worker:MockWorker``; the
in-process variant runs the same class over memory streams.
"""

from __future__ import annotations

import sys

from synapse_core.plugin import ModelWorker, worker_main

from . import __version__
from .logic import embed_tokens
from .options import MockOptions

IMPLEMENTATION = "synapse-mock-transport"


class MockWorker(ModelWorker):
    """Deterministic outputs; fault knobs and tracing come from the kit."""

    options_type = MockOptions
    implementation = IMPLEMENTATION
    version = __version__

    def load(self, options: MockOptions) -> None:
        self.buckets = options.buckets
        self.dims = options.dims
        self.max_batch = options.max_batch
        self.identity = f"mock:{self.package}:d{options.dims}:v1"

    def embed(self, batch: list[list[int]]) -> list[list[float]]:
        return [embed_tokens(seq, self.dims) for seq in batch]

    def rerank(self, query: list[int], batch: list[list[int]]) -> list[float]:
        q = embed_tokens(query, self.dims)
        return [
            sum(a * b for a, b in zip(q, embed_tokens(seq, self.dims), strict=True))
            for seq in batch
        ]


if __name__ == "__main__":
    sys.exit(worker_main(MockWorker))
