"""The CPU worker: a :class:`~synapse_core.plugin.ModelWorker` over :mod:`synapse_models`.

The transport starts it as ``synapse_cpu.worker:CpuWorker``. It loads and
checks the model once, then embeds each request's token ids (or scores each
document with the query: a cross-encoder's logit, a bi-encoder's cosine); the
kit does the protocol, the shape checks, tracing and the fault knobs.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from synapse_core.plugin import Declined, Kind, ModelWorker, worker_main
from synapse_models import model as runtime
from synapse_models.folder import read_json
from synapse_models.outputs import offered

from . import __version__
from .cores import LANE_ID, CoreShare, lane_dir
from .options import CpuOptions

IMPLEMENTATION = "synapse-cpu"


class CpuWorker(ModelWorker):
    options_type = CpuOptions
    implementation = IMPLEMENTATION
    version = __version__

    def load(self, options: CpuOptions) -> None:
        # Without a fixed count, each request runs on this worker's share of the
        # cores among the lane's busy workers (see synapse_cpu.cores).
        share = None if options.threads is not None else CoreShare(lane_dir(LANE_ID))
        self.runner = runtime.load(
            options.folder(),
            options.sha256,
            options.runtime,
            cache_dir=options.cache_dir,
            batch_tokens=options.batch_tokens,
            quantize=options.quantize,
            threads=options.threads,
            share=share,
            spinning=options.spin_wait,
            instruction=options.instruction,
        )
        self.buckets = options.buckets or self.runner.layout.buckets()
        self.max_batch = options.max_batch
        self.dims = self.runner.dims
        self.identity = self.runner.identity
        found = offered(self.runner.layout)
        if "sparse" in found:  # indices below the larger of the vocabularies
            vocab = read_json(self.runner.files.config).get("vocab_size", 0)
            found["sparse"] = max(self.runner.tokenizer.vocab_size(), int(vocab))
        self.widths = {Kind(name): width for name, width in found.items() if name != "dense"}
        self.dense = "dense" in found

    def output_widths(self) -> dict[Kind, int]:
        widths = super().output_widths()
        if not self.dense:
            widths.pop(Kind.DENSE, None)
        return widths

    def embed(self, batch: list[list[int]]) -> runtime.Vectors:
        if not self.dense:
            raise Declined(f"{self.model!r} has no dense output", "unsupported-output")
        return self.runner.embed(batch)

    def sparse(self, batch: list[list[int]]) -> list[Any]:
        return self.runner.outputs(batch, ["sparse"])[0]

    def multi(self, batch: list[list[int]]) -> list[Any]:
        return self.runner.outputs(batch, ["multi"])[0]

    def outputs(self, batch: list[list[int]], kinds: Sequence[Kind]) -> list[Any]:
        """Every output asked for from one forward pass of the body."""
        return self.runner.outputs(batch, [kind.value for kind in kinds])

    def rerank(self, query: list[int], batch: list[list[int]]) -> runtime.Vectors:
        return self.runner.rerank(query, batch)

    def trace_facts(self) -> dict[str, object]:
        return {
            "runtime": self.runner.runtime,
            "quantize": self.runner.quantize,
            "weights_sha256": self.runner.sha256,
            "model_kind": self.runner.layout.kind,
        }


if __name__ == "__main__":
    sys.exit(worker_main(CpuWorker))
