"""The worker: a ModelWorker with only ``load`` and ``embed``.

The kit answers hello, admit/evict/inventory, checks shapes, and adds the
``faults`` and ``trace`` options (through :class:`WorkerOptions`).
"""

from __future__ import annotations

import math

import attrs

from synapse_core.plugin import ModelWorker, WorkerOptions, bucket_sizes, positive


@attrs.frozen
class HashOptions(WorkerOptions):
    """A model's ``[models.options]``."""

    buckets: tuple[int, ...] = attrs.field(default=(32, 128), validator=bucket_sizes)
    dims: int = attrs.field(default=32, validator=positive)
    max_batch: int = attrs.field(default=8, validator=positive)


class HashWorker(ModelWorker):
    options_type = HashOptions

    def load(self, options: HashOptions) -> None:
        self.buckets = sorted(options.buckets)
        self.dims = options.dims
        self.max_batch = options.max_batch
        self.identity = f"hash:{self.package}:d{options.dims}:v1"

    def embed(self, batch: list[list[int]]) -> list[list[float]]:
        rows = []
        for tokens in batch:  # each row from its own tokens only
            row = [0.0] * self.dims
            for token in tokens:
                row[token * 2654435761 % self.dims] += 1.0
            norm = math.sqrt(sum(v * v for v in row)) or 1.0
            rows.append([v / norm for v in row])
        return rows
