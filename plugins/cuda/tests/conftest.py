"""Fixtures for the CUDA lane's tests: every test runs on the simulated device
(onnxruntime's CPU execution provider, a simulated memory size), with lane
locks in a private folder of its own; both anyio backends; and the model
home's reference fixtures."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

import pytest

import synapse_core as synapse
import synapse_cuda.plugin
from synapse_core.testing import host_config, model_entry
from synapse_models.testing import (  # noqa: F401  (fixtures)
    TINY,
    graph_cache_home,
    matches_reference,
    model_dir,
    onnx_cache,
    onnxruntime_model,
    reference,
    reference_vectors,
)

REFERENCE: dict[str, Any] = json.loads((TINY / "reference.json").read_text(encoding="utf-8"))[
    "models"
]
DEADLINE_S = 60.0  # bounds a broken worker; not a timing claim
config = functools.partial(host_config, source="test", exit_grace_s=5.0, exchange_timeout_s=30.0)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


#: the device the tests run on: the simulated one, unless
#: ``SYNAPSE_CUDA_TEST_DEVICE=nvidia`` (plugins/cuda/devicecheck.sh, on a GPU)
TEST_DEVICE = os.environ.get("SYNAPSE_CUDA_TEST_DEVICE", "simulated")
#: for tests whose numbers are the simulated device's estimates
simulated_only = pytest.mark.skipif(
    TEST_DEVICE != "simulated", reason="expects the simulated device's estimates"
)


@pytest.fixture(autouse=True)
def simulated_gpu(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The test device for the host and its workers, and a lock folder per test."""
    runtime = tmp_path_factory.mktemp("runtime")
    runtime.chmod(0o700)
    monkeypatch.setenv("SYNAPSE_CUDA_DEVICE", TEST_DEVICE)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.delenv("SYNAPSE_CUDA_SIMULATED_MIB", raising=False)
    monkeypatch.delenv("SYNAPSE_CUDA_SIMULATED_GPUS", raising=False)
    if TEST_DEVICE == "simulated":
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return runtime


def tiny(name: str, task: str | None = None, **options: Any) -> dict[str, Any]:
    """A catalog entry of the tiny model folder ``name`` on the cuda transport."""
    kind = REFERENCE[name]["kind"] if task is None else task
    return model_entry(
        name, task=kind, transport="cuda", ceiling=512, model_dir=str(TINY / name), **options
    )


def host(cfg: synapse.HostConfig, *plugins: Any) -> Any:
    return synapse.open_host(cfg, plugins=[synapse_cuda.plugin, *plugins])


def deadline(seconds: float = DEADLINE_S) -> synapse.Deadline:
    return synapse.Deadline.after(seconds)
