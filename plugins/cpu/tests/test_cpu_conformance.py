"""The conformance suite against the CPU transport, with the real MiniLM.

Every check starts workers and each worker loads the model (a few hundred
milliseconds of reading and hashing on a busy machine), so the subject is the
smallest that still exercises the contract: two buckets, a small batch, one
embed and one rerank entry sharing the same weights. The host side hashes the
weights once per process (``verify_before_launch`` remembers the file).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from synapse_core.plugin import InProcessWorkers, Launched, LaunchRequest
from synapse_core.testing import model_entry
from synapse_core.testing.conformance import Conformance, Subject
from synapse_cpu.transport import CpuTransport
from synapse_cpu.worker import CpuWorker

pytestmark = pytest.mark.subprocess

OPTIONS = {"buckets": [16, 32], "max_batch": 4}

_pids = itertools.count(6_000_000)


class InProcessCpuTransport(InProcessWorkers, CpuTransport):
    """The same worker class over memory streams, for the variants' agreement check."""

    async def launch(self, request: LaunchRequest) -> Launched:
        return self.start_worker(request, CpuWorker, next(_pids))


class TestCpuTransport(Conformance):
    """The default options: onnxruntime, float32, on the cores' share."""

    options: dict[str, object] = OPTIONS
    #: the fixture that builds this variant's graph first, so workers only load it
    built = "onnxruntime_model"
    #: how far two computations of one row may differ (the kit's default)
    atol = 1e-5

    @pytest.fixture
    def subject(self, request: pytest.FixtureRequest, onnx_cache: Path) -> Subject:
        request.getfixturevalue(self.built)
        options = {**self.options, "cache_dir": str(onnx_cache)}
        models = [
            model_entry(
                name, task=task, transport="cpu", package="all-MiniLM-L6-v2", defaults=options
            )
            for name, task in (("e", "embed"), ("r", "rerank"))
        ]
        return Subject(
            transport=CpuTransport(),
            in_process=InProcessCpuTransport(),
            models=models,
            atol=self.atol,
            # A worker's hello comes after the model loads: generous on a busy machine.
            settings={"exchange_timeout_s": 60.0},
        )


class TestCpuInt8Transport(TestCpuTransport):
    """The int8 graph keeps the same contract (its vectors are another identity's)."""

    options = {**OPTIONS, "quantize": "int8"}
    built = "int8_model"
    # Activations are quantized per forward slice, so a row moves with its batch
    # mates: up to 0.031 per value on the reference texts, a cosine above 0.98.
    atol = 0.05


class TestCpuNumpyTransport(TestCpuTransport):
    """The numpy fallback, chosen explicitly."""

    options = {**OPTIONS, "runtime": "numpy"}
    built = "numpy_model"
