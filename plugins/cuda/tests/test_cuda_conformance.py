"""The conformance suite against the CUDA transport on the simulated device,
with the real MiniLM: float16 (the default) and float32."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from synapse_core.plugin import InProcessWorkers, Launched, LaunchRequest
from synapse_core.testing import model_entry
from synapse_core.testing.conformance import Conformance, Subject
from synapse_cuda.transport import CudaTransport, held_lane
from synapse_cuda.worker import CudaWorker

pytestmark = pytest.mark.subprocess

OPTIONS = {"buckets": [16, 32], "max_batch": 4}

_pids = itertools.count(7_000_000)


class InProcessCudaTransport(InProcessWorkers, CudaTransport):
    """The same worker class over memory streams, holding the host's lane lock."""

    async def launch(self, request: LaunchRequest) -> Launched:
        env = {**os.environ, **self.worker_env(held_lane(request))}
        worker = type("InProcessCudaWorker", (CudaWorker,), {"environ": env})
        return self.start_worker(request, worker, next(_pids))


class TestCudaTransport(Conformance):
    """float16, the default."""

    options: dict[str, object] = OPTIONS
    #: float16: a row moves with its batch mates' padding by up to this much
    atol = 2e-3

    @pytest.fixture
    def subject(self, onnxruntime_model: object, onnx_cache: Path) -> Subject:
        options = {**self.options, "cache_dir": str(onnx_cache)}
        models = [
            model_entry(
                name, task=task, transport="cuda", package="all-MiniLM-L6-v2", defaults=options
            )
            for name, task in (("e", "embed"), ("r", "rerank"))
        ]
        return Subject(
            transport=CudaTransport(),
            in_process=InProcessCudaTransport(),
            models=models,
            atol=self.atol,
            settings={"exchange_timeout_s": 60.0},
        )


class TestCudaFloat32Transport(TestCudaTransport):
    """float32, as an option."""

    options = {**OPTIONS, "precision": "fp32"}
    atol = 1e-5
