"""The conformance suite against the core's own fake transport, both variants."""

from __future__ import annotations

import pytest

from synapse_core.testing import model_entry
from synapse_core.testing.conformance import Conformance, Subject
from synapse_core.testing.fake import FakeTransport, InProcessFakeTransport

OPTIONS = {"buckets": [8, 16, 32], "dims": 16, "max_batch": 4}


class TestFakeTransport(Conformance):
    @pytest.fixture
    def subject(self) -> Subject:
        models = [
            model_entry(
                name,
                task=task,
                transport="fake",
                package=f"fake-{name}",
                ceiling=64,
                defaults=OPTIONS,
            )
            for name, task in (("e", "embed"), ("r", "rerank"))
        ]
        return Subject(
            transport=FakeTransport(), in_process=InProcessFakeTransport(), models=models
        )
