"""The conformance suite against the mock transport, subprocess and in-process."""

from __future__ import annotations

import pytest

from synapse_core.plugin import Conformance, Subject
from synapse_mock_transport.inprocess import InProcessTransport
from synapse_mock_transport.transport import MockTransport

OPTIONS = {"buckets": [16, 32, 64], "dims": 32, "max_batch": 4}


class TestMockTransport(Conformance):
    @pytest.fixture
    def subject(self) -> Subject:
        models = [
            {
                "name": name,
                "task": task,
                "transport": "mock",
                "package": f"mock-{name}",
                "ceiling": 128,
                "options": OPTIONS,
            }
            for name, task in (("e", "embed"), ("r", "rerank"))
        ]
        return Subject(transport=MockTransport(), in_process=InProcessTransport(), models=models)
