"""The conformance suite against the direct-ANE transport on the simulated device.

Both variants take the real lane lock, in a runtime directory of the test's own.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from synapse_ane_direct.inprocess import InProcessAneTransport
from synapse_ane_direct.transport import AneDirectTransport
from synapse_core.testing import model_entry
from synapse_core.testing.conformance import Conformance, Subject

OPTIONS = {"buckets": [16, 32], "dims": 16, "max_batch": 2}


class TestAneDirectSimulated(Conformance):
    @pytest.fixture
    def subject(self, tmp_path: Path) -> Subject:
        models = [
            model_entry(
                name, task=task, transport="ane-direct", package=f"ane-{name}", defaults=OPTIONS
            )
            for name, task in (("e", "embed"), ("r", "rerank"))
        ]
        return Subject(
            transport=AneDirectTransport("simulated", runtime_dir=tmp_path / "sub"),
            in_process=InProcessAneTransport(tmp_path / "inproc"),
            models=models,
        )
