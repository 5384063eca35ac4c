"""The conformance suite against the core's own fake transport, both variants."""

from __future__ import annotations

import pytest

from synapse_core.testing.conformance import Conformance, Subject
from synapse_core.testing.fake import FakeTransport, InProcessFakeTransport

OPTIONS = {"buckets": [8, 16, 32], "dims": 16, "max_batch": 4}


class TestFakeTransport(Conformance):
    @pytest.fixture
    def subject(self) -> Subject:
        def model(name: str, task: str) -> dict[str, object]:
            return {
                "name": name,
                "task": task,
                "transport": "fake",
                "package": f"fake-{name}",
                "ceiling": 64,
                "options": OPTIONS,
            }

        return Subject(
            transport=FakeTransport(),
            in_process=InProcessFakeTransport(),
            models=[model("e", "embed"), model("r", "rerank")],
        )
