from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _no_device_override(monkeypatch: pytest.MonkeyPatch) -> None:
    # A developer's SYNAPSE_ANE_DEVICE must not change what these tests see.
    monkeypatch.delenv("SYNAPSE_ANE_DEVICE", raising=False)
