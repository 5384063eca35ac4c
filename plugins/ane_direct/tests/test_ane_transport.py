"""Availability, catalog, options and launch rules of the ``ane-direct`` transport."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from synapse_ane_direct.hardware import FRAMEWORK, probe
from synapse_ane_direct.options import AneOptions, parse_options
from synapse_ane_direct.transport import LANE, AneDirectTransport, held_lane
from synapse_core import ConfigError, HostConfig, ModelSpec, PluginHost, Refused, open_host
from synapse_core.catalog import Catalog
from synapse_core.plugin import LaunchRequest
from synapse_core.testing import host_config, model_entry, transport_plugin

linux_only = pytest.mark.skipif(sys.platform == "darwin", reason="the refusal is for non-macOS")


@linux_only
def test_availability_refuses_clearly_without_simulation() -> None:
    availability = AneDirectTransport().availability()
    assert not availability.available
    assert "macOS" in availability.reason
    assert repr(sys.platform) in availability.reason
    assert "mock" in availability.reason  # says what to use instead


def test_probe_names_what_is_missing() -> None:
    assert "Apple silicon" in probe("darwin", "x86_64", exists=lambda _: True)
    missing = probe("darwin", "arm64", exists=lambda _: False)
    assert FRAMEWORK in missing
    assert probe("darwin", "arm64", exists=lambda path: path == FRAMEWORK) == ""


def test_simulated_device_is_available_anywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    unavailable = AneDirectTransport(probe=lambda: "no Neural Engine here")
    assert not unavailable.availability().available
    assert AneDirectTransport("simulated", probe=lambda: "no").availability().available
    monkeypatch.setenv("SYNAPSE_ANE_DEVICE", "simulated")
    assert unavailable.availability().available
    monkeypatch.setenv("SYNAPSE_ANE_DEVICE", "gpu")
    refused = unavailable.availability()
    assert not refused.available and "SYNAPSE_ANE_DEVICE='gpu'" in refused.reason


@linux_only
@pytest.mark.anyio
async def test_embed_with_ane_model_here_is_refused_as_transport_unavailable(
    tmp_path: Path,
) -> None:
    runtime = tmp_path / "runtime"
    transport = AneDirectTransport(runtime_dir=runtime)
    async with open_host(HostConfig(), plugins=[transport_plugin(transport)]) as host:
        with pytest.raises(Refused) as info:
            await host.embed("ane-minilm", ["some text"])
        assert info.value.code == "transport-unavailable"
        assert "macOS" in str(info.value)
        assert host.snapshot().lanes == {}  # nothing started
    assert not runtime.exists()  # not even the lane lock was taken


def test_catalog_lists_shipped_models_unavailable_with_the_reason() -> None:
    plugins = PluginHost([transport_plugin(AneDirectTransport(probe=lambda: "no ANE on this box"))])
    catalog = Catalog(HostConfig(), plugins)
    for name, task in (("ane-minilm", "embed"), ("ane-rerank-minilm", "rerank")):
        entry = catalog.entries[name]
        assert entry.spec.task == task
        assert not entry.available
        assert "no ANE on this box" in entry.problem
        assert entry.lane == LANE
    assert LANE.lane_id == "ane:0" and LANE.hardware_lock


def test_options_default_and_structure() -> None:
    assert parse_options({}) == AneOptions()
    options = parse_options({"buckets": [16, 32], "dims": 8, "device": "simulated"})
    assert options.buckets == (16, 32) and options.dims == 8 and options.device == "simulated"


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"dims": 0}, "options.dims: must be greater than 0"),
        ({"max_batch": -1}, "options.max_batch: must be greater than 0"),
        ({"buckets": []}, "options.buckets: a worker needs at least one bucket"),
        ({"buckets": [16, 16]}, "options.buckets: a bucket is listed twice"),
        ({"buckets": [16, "x"]}, "options.buckets[1]: expected int"),
        ({"device": "gpu"}, "options.device: expected one of 'hardware', 'simulated'"),
        ({"compile_delay_s": -1.0}, "options.compile_delay_s: must be a finite number"),
        ({"bogus": 1}, "options: extra fields found (bogus)"),
    ],
)
def test_option_errors_name_the_field(options: dict[str, object], problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_options(options, source="model 'x'")
    assert any(p.startswith(problem) for p in info.value.problems), info.value.problems


def test_catalog_reports_bad_options_with_the_model_path() -> None:
    config = host_config(model_entry("a", transport="ane-direct", package="p", ceiling=64, dims=0))
    plugins = PluginHost([transport_plugin(AneDirectTransport("simulated"))])
    with pytest.raises(ConfigError) as info:
        Catalog(config, plugins)
    assert any(p.startswith("models[0].options.dims:") for p in info.value.problems)


def test_launch_refuses_without_a_held_lane_lock() -> None:
    spec = ModelSpec("a", "embed", "ane-direct", "p", 64)
    request = LaunchRequest(model=spec, worker_id="a#1", generation=1, lane=LANE)
    with pytest.raises(RuntimeError, match="lock"):
        held_lane(request)
