"""A real host (the core's in-process fake workers) recording a certification stream."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from synapse_certify import Recorder, check, read_stream
from synapse_certify import plugin as certify_plugin
from synapse_core import HostConfig, PluginHost, open_host
from synapse_core.events import AdmissionCount, ShapeAdmitted, WorkerInventory
from synapse_core.testing import host_config, model_entry, transport_plugin
from synapse_core.testing.fake import InProcessFakeTransport

MODEL = model_entry("mini-a", package="mock-minilm", ceiling=512, dims=8, buckets=[16, 32, 64])
# 1, 20 and 40 words: buckets 16, 32 and 64, so three admissions.
TEXTS = ["short", " ".join(["word"] * 40), "tiny text", " ".join(["mid"] * 20)]


def config(certify: bool) -> HostConfig:
    return attrs.evolve(host_config(MODEL), certify_observation=certify)


def test_installed_entry_point_does_not_make_hosts_observe() -> None:
    # Installing synapse-certify must not make ordinary serving build events.
    assert not PluginHost([certify_plugin]).observing
    assert PluginHost([certify_plugin, Recorder()]).observing


@pytest.mark.anyio
async def test_recorded_mixed_length_stream_validates(tmp_path: Path) -> None:
    transport = InProcessFakeTransport("mock")
    path = tmp_path / "stream.jsonl"
    recorder = Recorder(path)
    plugins = [certify_plugin, transport_plugin(transport), recorder]
    async with open_host(config(certify=True), plugins=plugins) as host:
        result = await host.embed("mini-a", TEXTS)
    recorder.close()

    assert len(result.vectors) == len(TEXTS)
    events = read_stream(path)
    assert events == recorder.events  # the file says what the hook saw
    report = check(events)
    assert report.ok, [p.line() for p in report.problems]

    admitted = [e.shape.bucket for e in events if isinstance(e, ShapeAdmitted)]
    assert sorted(admitted) == [16, 32, 64]
    inventories = [e for e in events if isinstance(e, WorkerInventory)]
    counts = [e.count for e in events if isinstance(e, AdmissionCount)]
    assert len(inventories) == len(admitted)  # an inventory per admission
    assert [len(e.shapes or []) for e in inventories] == [1, 2, 3] == counts
    assert len(transport.frames("inventory")) == len(admitted)


@pytest.mark.anyio
async def test_without_certify_observation_no_inventory_is_recorded() -> None:
    transport = InProcessFakeTransport("mock")
    recorder = Recorder()
    plugins = [transport_plugin(transport), recorder]
    async with open_host(config(certify=False), plugins=plugins) as host:
        await host.embed("mini-a", TEXTS)

    kinds = {type(e).__name__ for e in recorder.events}
    assert "ShapeAdmitted" in kinds  # the recorder was listening
    assert not kinds & {"WorkerInventory", "AdmissionCount"}
    assert transport.frames("inventory") == []  # and no worker was asked
    assert not check(recorder.events).ok  # such a stream certifies nothing
