"""The lane's availability, probed honestly: each missing piece makes it
unavailable with one line saying what to do, and the host keeps serving its
other lanes. NVML and onnxruntime's provider list are fakes here."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

import synapse_core as synapse
from synapse_core.testing import model_entry, transport_plugin
from synapse_core.testing.fake import FakeTransport
from synapse_cuda.availability import Probe, probe
from synapse_cuda.device import Nvml, NvmlError, visible_entries
from synapse_cuda.transport import CudaTransport

from .conftest import config, deadline, simulated_only, tiny

BOTH = ["CUDAExecutionProvider", "CPUExecutionProvider"]


class FakeNvml(Nvml):
    """A driver that finds ``gpus`` GPUs."""

    def __init__(self, gpus: int) -> None:
        self.gpus = gpus

    def count(self) -> int:
        return self.gpus


def no_driver() -> Nvml:
    raise NvmlError("no NVIDIA driver: libnvidia-ml.so.1 cannot be loaded (not found)")


def where(
    builds: Sequence[str] = ("onnxruntime-gpu",), gpus: int = 1, providers: Sequence[str] = BOTH
) -> Probe:
    return Probe(lambda: builds, lambda: FakeNvml(gpus), lambda: providers, lambda: True)


@pytest.mark.parametrize(
    ("probed", "env", "reason"),
    [
        (where(("onnxruntime", "onnxruntime-gpu")), {}, "both onnxruntime and onnxruntime-gpu"),
        (Probe(lambda: (), no_driver, lambda: BOTH, lambda: False), {}, "not installed"),
        (Probe(lambda: ("onnxruntime-gpu",), no_driver), {}, "no NVIDIA driver"),
        (where(gpus=0), {}, "no NVIDIA GPU: the driver finds none"),
        (where(), {"CUDA_VISIBLE_DEVICES": ""}, "CUDA_VISIBLE_DEVICES='' hides every one"),
        (where(), {"CUDA_VISIBLE_DEVICES": "-1"}, "hides every one of the 1 GPUs"),
        (where(), {"CUDA_VISIBLE_DEVICES": "MIG-1234"}, "MIG instances"),
        (
            where(("onnxruntime",), providers=["CPUExecutionProvider"]),
            {},
            "onnxruntime has no CUDAExecutionProvider (only CPUExecutionProvider): "
            "the CPU build is installed; pip uninstall",
        ),
    ],
)
def test_each_missing_piece_is_one_line_saying_what_to_do(
    probed: Probe, env: dict[str, str], reason: str
) -> None:
    transport = CudaTransport("nvidia", where=probed, env=env)
    availability = transport.availability()
    assert not availability.available
    assert reason in availability.reason and "\n" not in availability.reason
    assert transport.describe() == availability.reason


def test_a_gpu_and_the_cuda_provider_make_it_available() -> None:
    found = probe({"CUDA_VISIBLE_DEVICES": "1,0"}, where(gpus=2))
    assert found.reason == "" and found.entries == ("1", "0")


def test_visible_devices_are_read_as_cuda_reads_them() -> None:
    assert visible_entries({}, 3) == ["0", "1", "2"]
    assert visible_entries({"CUDA_VISIBLE_DEVICES": "2, 0"}, 3) == ["2", "0"]
    assert visible_entries({"CUDA_VISIBLE_DEVICES": "0,7,1"}, 3) == ["0"]  # stops at 7
    assert visible_entries({"CUDA_VISIBLE_DEVICES": "GPU-ab12,1"}, 2) == ["GPU-ab12", "1"]
    assert visible_entries({"CUDA_VISIBLE_DEVICES": "-1"}, 2) == []


def test_a_machine_without_a_driver_says_so() -> None:
    with pytest.raises(NvmlError, match=r"no NVIDIA driver: libnvidia-ml-missing\.so"):
        Nvml("libnvidia-ml-missing.so")


def test_a_probe_that_raises_is_a_reason_not_a_crash() -> None:
    def broken() -> Nvml:
        raise RuntimeError("boom")

    transport = CudaTransport("nvidia", where=Probe(lambda: ("onnxruntime-gpu",), broken))
    assert "probing the GPUs failed: RuntimeError('boom')" in transport.availability().reason


@simulated_only
def test_a_gpu_that_is_not_visible_makes_its_model_unavailable() -> None:
    transport = CudaTransport()  # the simulated device: one GPU
    spec = config(tiny("bert-cls", gpu=1)).models[0]
    availability = transport.model_availability(spec)
    assert not availability.available
    assert "options.gpu = 1, but 1 GPU(s) are visible (lanes cuda:0" in availability.reason


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_without_a_gpu_the_host_serves_its_other_lanes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SYNAPSE_CUDA_DEVICE", "nvidia")
    monkeypatch.setattr("synapse_cuda.plugin.TRANSPORT", CudaTransport(where=where(gpus=0)))
    import synapse_cuda.plugin

    cfg = config(tiny("bert-cls"), model_entry("other", transport="fake"))
    async with synapse.open_host(
        cfg, plugins=[synapse_cuda.plugin, transport_plugin(FakeTransport())]
    ) as h:
        with pytest.raises(synapse.Refused) as refused:
            await h.embed("bert-cls", ["hello"], deadline=deadline())
        assert refused.value.code == "transport-unavailable"
        assert "no NVIDIA GPU" in refused.value.message
        assert len((await h.embed("other", ["hello"], deadline=deadline())).vectors) == 1


def test_the_probe_follows_the_device_kind_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """One transport (the plugin's, for the whole process) probed first for
    the NVIDIA driver, then asked for the simulated device: the second answer
    is the simulated device's, not the first one kept."""
    transport = CudaTransport(where=Probe(lambda: ("onnxruntime-gpu",), no_driver))
    monkeypatch.setenv("SYNAPSE_CUDA_DEVICE", "nvidia")
    assert not transport.availability().available
    monkeypatch.setenv("SYNAPSE_CUDA_DEVICE", "simulated")
    assert transport.availability().available
