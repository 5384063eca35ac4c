"""The conformance suite against the CPU transport, with the real MiniLM.

Every check starts workers and each worker loads the model (a few hundred
milliseconds of reading and hashing on a busy machine), so the subject is the
smallest that still exercises the contract: two buckets, a small batch, one
embed and one rerank entry sharing the same weights. The host side hashes the
weights once per process (``verify_before_launch`` remembers the file).
"""

from __future__ import annotations

import itertools

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
    @pytest.fixture
    def subject(self) -> Subject:
        models = [
            model_entry(
                name, task=task, transport="cpu", package="all-MiniLM-L6-v2", defaults=OPTIONS
            )
            for name, task in (("e", "embed"), ("r", "rerank"))
        ]
        return Subject(
            transport=CpuTransport(),
            in_process=InProcessCpuTransport(),
            models=models,
            # A worker's hello comes after the model loads: generous on a busy machine.
            settings={"exchange_timeout_s": 60.0},
        )
