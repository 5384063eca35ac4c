"""The whole conformance suite, from one fixture."""

from __future__ import annotations

import pytest
from synapse_hash_transport.transport import HashTransport, InProcessHashTransport

from synapse_core.testing.conformance import Conformance, Subject


class TestHashTransport(Conformance):
    @pytest.fixture
    def subject(self) -> Subject:
        models = [
            {
                "name": "hash-small",
                "task": "embed",
                "transport": "hash",
                "package": "hash-example",
                "ceiling": 128,
                "options": {"buckets": [16, 64], "dims": 16, "max_batch": 4},
            }
        ]
        return Subject(
            transport=HashTransport(), in_process=InProcessHashTransport(), models=models
        )
