"""Idle models let go: a model with no call for its ``idle_unload_s`` has no
worker process and no reservation, and its next call starts one and
succeeds. Driven by a fake clock and ``Host.unload_idle``, in-process, on
both anyio backends: nothing waits on real time."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import synapse_core as synapse
from synapse_core.testing import transport_plugin
from synapse_core.testing.fake import InProcessFakeTransport

pytestmark = pytest.mark.anyio


def reserved(host: synapse.Host) -> int:
    return sum(lane.reserved for lane in host.snapshot().lanes.values())


async def test_a_model_idle_past_its_limit_lets_go_and_comes_back(
    make_model: Any, make_config: Any
) -> None:
    clock = synapse.FakeClock()
    transport = InProcessFakeTransport()
    config = make_config({**make_model("m"), "idle_unload_s": 10.0}, make_model("kept"))
    async with synapse.open_host(
        config, plugins=[transport_plugin(transport)], clock=clock
    ) as host:
        await host.embed("m", ["x"])
        await host.embed("kept", ["x"])
        worker = host.worker("m")
        assert worker is not None and worker.process is not None
        process = worker.process
        assert host.resident("m") and reserved(host) > 0

        clock.advance(9.0)
        assert await host.unload_idle() == []  # not idle long enough
        await host.embed("m", ["x"])  # a call starts its time again
        clock.advance(9.0)
        assert await host.unload_idle() == []
        clock.advance(1.0)
        assert await host.unload_idle() == ["m"]

        assert not host.resident("m") and host.resident("kept")
        assert host.snapshot().worker("m").state == "exited"
        assert host.snapshot().worker("m").pid is None
        assert process.returncode is not None  # its exit confirmed
        kept = host.snapshot().worker("kept").shapes
        assert reserved(host) == sum(shape.units for shape in kept)  # m's refunded

        result = await host.embed("m", ["x"])  # the next call starts it again
        assert len(result.vectors) == 1
        assert host.resident("m") and len(transport.launched("m")) == 2
        clock.advance(1000.0)
        assert await host.unload_idle() == ["m"]  # "kept" has no limit


async def test_the_host_default_applies_to_every_model(make_model: Any, make_config: Any) -> None:
    clock = synapse.FakeClock()
    config = make_config(
        make_model("a"), {**make_model("b"), "idle_unload_s": 100.0}, idle_unload_s=5.0
    )
    plugins = [transport_plugin(InProcessFakeTransport())]
    async with synapse.open_host(config, plugins=plugins, clock=clock) as host:
        await host.embed("a", ["x"])
        await host.embed("b", ["x"])
        clock.advance(5.0)
        assert await host.unload_idle() == ["a"]
        assert not host.resident("a") and host.resident("b")


@pytest.mark.parametrize(
    ("where", "value", "problem"),
    [
        ("model", 0, "models[0].idle_unload_s: must be greater than 0, got 0"),
        ("model", "soon", "models[0].idle_unload_s: expected float"),
        ("host", -1.0, "idle_unload_s: must be greater than 0, got -1.0"),
    ],
)
def test_a_bad_idle_unload_s_names_its_path(
    make_model: Any, make_config: Any, where: str, value: object, problem: str
) -> None:
    entry = make_model("m")
    settings: dict[str, object] = {}
    if where == "model":
        entry["idle_unload_s"] = value
    else:
        settings["idle_unload_s"] = value
    with pytest.raises(synapse.ConfigError) as caught:
        make_config(entry, **settings)
    assert any(problem in p for p in caught.value.problems), caught.value.problems


async def test_a_call_while_an_idle_model_is_let_go_waits_then_starts_it_again(
    make_model: Any, make_config: Any
) -> None:
    """Issue 42: a call in the window between an idle unload's start and its
    workers' confirmed exits was refused as ``retired`` (a 503); it waits for
    the exits and starts a new worker. The exit is held until the test has
    seen the call waiting, so the window is certain, not a race."""
    clock = synapse.FakeClock()
    transport = InProcessFakeTransport()
    transport.hold_exits = True  # a process is gone only once the test says so
    config = make_config({**make_model("m"), "idle_unload_s": 10.0})
    async with synapse.open_host(
        config, plugins=[transport_plugin(transport)], clock=clock
    ) as host:
        await host.embed("m", ["x"])
        worker = host.worker("m")
        assert worker is not None
        first = transport.launched("m")[0].process
        transport.hold_exits = False  # the next worker's exit is not held
        clock.advance(10.0)
        unloaded: list[str] = []
        results: list[synapse.EmbedResult] = []

        async def unload() -> None:
            unloaded.extend(await host.unload_idle())

        async def call() -> None:
            results.append(await host.embed("m", ["x"]))

        async with anyio.create_task_group() as tg:
            tg.start_soon(unload)
            while not worker.retiring:  # the unload has begun
                await worker.changed()
            tg.start_soon(call)
            await anyio.wait_all_tasks_blocked()
            assert not results and len(transport.launched("m")) == 1  # it waits
            assert first.returncode is None  # the old worker's exit is still held
            first.confirm_exit()
        assert unloaded == ["m"]
        assert len(results) == 1 and len(results[0].vectors) == 1
        assert len(transport.launched("m")) == 2 and host.resident("m")
        new = host.worker("m")
        assert new is not None and new is not worker
