"""The CPU lane's default request budget (``max_batch_tokens``), from its measured speed."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

import synapse_cpu.transport
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


def test_the_budget_asked_for_every_call_looks_nothing_up_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every call's cut asks for the budget: onnxruntime is looked for on disk
    once per process, and the options are not structured again."""
    synapse_cpu.transport.onnxruntime_problem.cache_clear()
    looked: list[str] = []
    find_spec = importlib.util.find_spec

    def counted(name: str, package: str | None = None) -> Any:
        looked.append(name)
        return find_spec(name, package)

    def parse(self: CpuTransport, model: ModelSpec) -> Any:
        raise AssertionError(f"options of {model.name!r} structured again")

    monkeypatch.setattr(importlib.util, "find_spec", counted)
    monkeypatch.setattr(CpuTransport, "model_options", parse)
    transport = CpuTransport()
    for _ in range(3):
        assert request_budget(spec(), transport) == 350
        assert request_budget(spec(runtime="numpy"), transport) == 210
    assert looked == ["onnxruntime", "onnx"]
