"""The GPU's lane lock: one host per GPU, named by the GPU's UUID, inherited by
workers; a worker without it never touches the device."""

from __future__ import annotations

from pathlib import Path

import pytest

import synapse_core as synapse
from synapse_core.plugin import LaunchSpec
from synapse_cuda.lanelock import acquire, lock_path
from synapse_cuda.options import CudaOptions
from synapse_cuda.worker import CudaWorker

from .conftest import TINY, config, deadline, host, tiny


def test_the_lock_is_named_by_the_gpu_not_its_index(tmp_path: Path) -> None:
    with acquire("cuda:0", tmp_path, name="GPU-1234") as held:
        assert held.path == lock_path("GPU-1234", tmp_path)
        # Another host that sees the same GPU as cuda:1 contends for the same lock.
        with pytest.raises(synapse.LaneLocked, match="lane cuda:1 is held by pid"):
            acquire("cuda:1", tmp_path, name="GPU-1234")


def test_a_worker_without_the_lane_lock_refuses_to_load() -> None:
    spec = LaunchSpec(model="m", package="p", worker_id="w", generation=1, options={})
    worker = type("Unlocked", (CudaWorker,), {"environ": {"SYNAPSE_CUDA_DEVICE": "simulated"}})
    with pytest.raises(ValueError, match="does not hold its GPU's lane lock"):
        worker(spec).load(CudaOptions(model_dir=str(TINY / "bert-cls")))


@pytest.mark.anyio
@pytest.mark.subprocess
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_second_host_on_a_held_gpu_is_refused_naming_the_holder() -> None:
    async with host(config(tiny("bert-cls"))) as first:
        await first.embed("bert-cls", ["hello"], deadline=deadline())
        async with host(config(tiny("bert-cls"))) as second:
            with pytest.raises(synapse.LaneLocked, match="never kills a holder or bypasses"):
                await second.embed("bert-cls", ["hello"], deadline=deadline())
