"""The replica's host and Ray's multiplexing mapped onto it, without Ray: real
mock workers, Ray's load function stood in for by a recording one.

asyncio only: Ray Serve runs replica code on asyncio, and the replica's host
is held open by an asyncio task.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from synapse_core import Host, HostConfig, Refused, Retired
from synapse_core.testing import host_config
from synapse_ray.replica_host import ReplicaHost
from synapse_ray.residency import RESIDENCY_ATTEMPTS, Residency, Resident, load_resident
from synapse_ray.testing import SETTINGS, alive, mock_model

pytestmark = [pytest.mark.anyio, pytest.mark.subprocess]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def config(trace: Path | None = None) -> HostConfig:
    models = (mock_model("a", trace=trace), mock_model("b", trace=trace))
    return host_config(*models, source="test catalog", **SETTINGS)


@pytest.fixture
def residency() -> Residency:
    return Residency()


@pytest.fixture
async def replica(tmp_path: Path, residency: Residency) -> AsyncIterator[ReplicaHost]:
    replica = ReplicaHost(config(tmp_path / "trace.jsonl"), around_call=residency)
    try:
        yield replica
    finally:
        await replica.aclose()


def worker_pid(host: Host, model: str) -> int:
    pid = host.snapshot().worker(model).pid
    assert pid is not None
    return pid


def stopped_politely(tmp_path: Path) -> set[int]:
    lines = (tmp_path / "trace.jsonl").read_text().splitlines()
    return {r["pid"] for r in map(json.loads, lines) if r["frame"] == "shutdown"}


class Loads:
    """Ray's multiplexed load function, recorded: loads through the host."""

    def __init__(self, replica: ReplicaHost) -> None:
        self.replica = replica
        self.models: list[str] = []

    async def __call__(self, model: str) -> Resident:
        self.models.append(model)
        return await load_resident(self.replica, model)


async def test_the_host_opens_once_on_first_use_and_starts_no_worker(
    replica: ReplicaHost,
) -> None:
    assert replica.opened is None
    first, second = await replica.get(), await replica.get()
    assert first is second is replica.opened
    assert first.snapshot().lanes == {}


async def test_close_retires_every_worker_and_refuses_new_work(
    replica: ReplicaHost, tmp_path: Path
) -> None:
    host = await replica.get()
    await host.load("a")
    await host.load("b")
    pids = {worker_pid(host, "a"), worker_pid(host, "b")}
    await replica.aclose()
    assert not {pid for pid in pids if alive(pid)}
    assert pids <= stopped_politely(tmp_path)
    await replica.aclose()  # a second close is a no-op
    with pytest.raises(Retired, match="shutting down"):
        await replica.get()


async def test_unloading_a_resident_retires_its_worker(
    replica: ReplicaHost, tmp_path: Path
) -> None:
    resident = await load_resident(replica, "a")
    host = await replica.get()
    pid = worker_pid(host, "a")
    # What Ray's LRU does with an evicted model.
    await resident.__del__()
    assert not alive(pid)
    assert pid in stopped_politely(tmp_path)
    with pytest.raises(Retired):
        await host.embed("a", ["x"])


async def test_a_call_makes_its_model_resident_first(
    replica: ReplicaHost, residency: Residency
) -> None:
    host = await replica.get()
    loads = Loads(replica)
    residency.resident = loads
    result = await host.embed("a", ["one", "two"])
    assert len(result.vectors) == 2
    assert loads.models == ["a"]


async def test_an_unknown_model_is_refused_without_loading(
    replica: ReplicaHost, residency: Residency
) -> None:
    host = await replica.get()
    loads = Loads(replica)
    residency.resident = loads
    with pytest.raises(Refused) as caught:
        await host.embed("nope", ["x"])
    assert caught.value.code == "unknown-model"
    assert loads.models == []


async def test_a_model_retired_under_a_call_is_made_resident_again(
    replica: ReplicaHost, residency: Residency
) -> None:
    host = await replica.get()
    await host.load("a")
    await host.retire("a")  # as if Ray's LRU evicted it just before the call
    calls: list[str] = []

    async def resident(model: str) -> Resident:
        # Ray still holds the model the first time; it loads it the second.
        calls.append(model)
        if len(calls) == 1:
            return Resident(model, replica)
        return await load_resident(replica, model)

    residency.resident = resident
    assert len((await host.embed("a", ["x"])).vectors) == 1
    assert calls == ["a", "a"]


async def test_retirement_retries_are_bounded(replica: ReplicaHost, residency: Residency) -> None:
    host = await replica.get()
    await host.load("a")
    await host.retire("a")
    calls: list[str] = []

    async def stale(model: str) -> Resident:
        calls.append(model)
        return Resident(model, replica)

    residency.resident = stale
    with pytest.raises(Retired):
        await host.embed("a", ["x"])
    assert len(calls) == RESIDENCY_ATTEMPTS
