"""Streams a real host records pass the replaying gate: evictions, recoveries,
retirement and reloading are steps it knows, not contradictions."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from synapse_certify import Recorder, check
from synapse_core import HostConfig, OutcomeUnknown, open_host
from synapse_core.events import ShapeRefunded, WorkerExited, WorkerStarted
from synapse_core.plugin import LaneInfo
from synapse_core.testing import host_config, model_entry, transport_plugin
from synapse_core.testing.fake import InProcessFakeTransport

pytestmark = pytest.mark.anyio


#: a mock catalog entry; ``options`` override three buckets, four dims, batches of two
model = functools.partial(model_entry, defaults={"buckets": [8, 16, 32], "dims": 4, "max_batch": 2})
#: a host that records for certification
config = functools.partial(host_config, certify_observation=True, exit_grace_s=5.0)


async def record(cfg: HostConfig, body: Any) -> Recorder:
    recorder = Recorder()
    transport = InProcessFakeTransport("mock", LaneInfo("mock:0"))
    async with open_host(cfg, plugins=[transport_plugin(transport), recorder]) as host:
        await body(host)
    return recorder


async def test_a_stream_with_evictions_passes_the_gate() -> None:
    # Shape (8, 2) costs 16 units: the lane holds one at a time.
    cfg = config(model("a"), model("b"), lanes={"mock:0": {"capacity": 20}})

    async def body(host: Any) -> None:
        for name in ("a", "b", "a", "b"):
            await host.embed(name, ["x"])

    recorder = await record(cfg, body)
    refunds = [e for e in recorder.events if isinstance(e, ShapeRefunded)]
    assert len(refunds) >= 4  # three evictions, then the last shape at close
    report = check(recorder.events)
    assert report.ok, [p.line() for p in report.problems]


async def test_a_stream_with_a_recovery_passes_the_gate() -> None:
    cfg = config(model("m", faults={"crash_on_infer": 1, "only_generation": 1}))

    async def body(host: Any) -> None:
        with pytest.raises(OutcomeUnknown):
            await host.embed("m", ["x"])
        await host.embed("m", ["y", "a longer text of words"])

    recorder = await record(cfg, body)
    starts = [e.generation for e in recorder.events if isinstance(e, WorkerStarted)]
    assert starts == [1, 2]
    report = check(recorder.events)
    assert report.ok, [p.line() for p in report.problems]


async def test_a_stream_with_retirement_and_reload_passes_the_gate() -> None:
    cfg = config(model("m"))

    async def body(host: Any) -> None:
        await host.embed("m", ["x"])
        await host.retire("m")
        await host.load("m")
        await host.embed("m", ["y"])

    recorder = await record(cfg, body)
    exits = [(e.worker_id, e.confirmed) for e in recorder.events if isinstance(e, WorkerExited)]
    assert exits == [("m#1", True), ("m#2", True)]
    report = check(recorder.events)
    assert report.ok, [p.line() for p in report.problems]
