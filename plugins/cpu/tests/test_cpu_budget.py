"""The CPU lane's default request budget (``max_batch_tokens``), from its measured speed."""

from __future__ import annotations

import pytest

from synapse_core.cut import request_budget
from synapse_core.plugin import ModelSpec
from synapse_cpu.costs import POSITIONS_PER_S, REQUEST_S
from synapse_cpu.transport import CpuTransport


def spec(budget: int | None = None, **options: object) -> ModelSpec:
    return ModelSpec(
        "m", "embed", "cpu", "all-MiniLM-L6-v2", 256, dict(options), max_batch_tokens=budget
    )


@pytest.mark.parametrize(("runtime", "positions"), [("numpy", 210), ("onnxruntime", 350)])
def test_default_budget_is_about_100_ms_of_the_runtime(runtime: str, positions: int) -> None:
    assert CpuTransport().max_batch_tokens(spec(runtime=runtime)) == positions
    assert positions == int(POSITIONS_PER_S[runtime] * REQUEST_S)


def test_the_catalogs_budget_wins() -> None:
    assert request_budget(spec(4096), CpuTransport()) == 4096
    assert request_budget(spec(), CpuTransport()) == 350  # the default runtime: onnxruntime
    assert request_budget(spec(runtime="numpy"), CpuTransport()) == 210
