"""The conformance suite against the mock transport, subprocess and in-process."""

from __future__ import annotations

import pytest

from synapse_core.testing import model_entry
from synapse_core.testing.conformance import Conformance, Subject
from synapse_mock_transport.inprocess import InProcessTransport
from synapse_mock_transport.transport import MockTransport

OPTIONS = {"buckets": [16, 32, 64], "dims": 32, "max_batch": 4}


class TestMockTransport(Conformance):
    @pytest.fixture
    def subject(self) -> Subject:
        models = [
            model_entry(name, task=task, package=f"mock-{name}", ceiling=128, defaults=OPTIONS)
            for name, task in (("e", "embed"), ("r", "rerank"))
        ]
        return Subject(transport=MockTransport(), in_process=InProcessTransport(), models=models)
