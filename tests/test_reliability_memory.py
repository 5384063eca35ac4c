"""Nothing of a finished call stays reachable, and a burst does not leave
its call tasks behind."""

from __future__ import annotations

import gc
import tracemalloc
from typing import Any

import anyio
import pytest

import synapse_core as synapse
from synapse_core.call import Call
from synapse_core.plan import Plan
from synapse_core.testing import transport_plugin
from synapse_core.testing.fake import FakeTransport, HeldReplies, InProcessFakeTransport

pytestmark = pytest.mark.anyio


def live(kind: type) -> int:
    gc.collect()
    return sum(type(o) is kind for o in gc.get_objects())


async def test_no_call_or_plan_stays_reachable_once_its_caller_has_the_result(
    make_model: Any, make_config: Any
) -> None:
    before = (live(Call), live(Plan))
    cfg = make_config(make_model("m"), make_model("r", task="rerank"))
    async with synapse.open_host(cfg, plugins=[transport_plugin(InProcessFakeTransport())]) as host:
        await host.embed("m", ["one", "two words", "three words here"])
        await host.rerank("r", "q", ["a", "b"])
        async with anyio.create_task_group() as tg:
            for i in range(20):
                tg.start_soon(host.embed, "m", [f"text {i}"])
        assert (live(Call), live(Plan)) == before


def call_tasks() -> int:
    return sum(task.name == "call runner" for task in anyio.get_running_tasks())


async def test_a_burst_leaves_no_call_task_behind(make_model: Any, make_config: Any) -> None:
    calls = live(Call)
    transport = InProcessFakeTransport()
    held = transport.reply_gate = HeldReplies()
    cfg = make_config(make_model("m"), max_concurrent=500, max_waiting=500)
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        await host.load("m")
        async with anyio.create_task_group() as tg:
            for i in range(500):
                tg.start_soon(host.embed, "m", [f"text {i}"])
        await anyio.wait_all_tasks_blocked()
        assert call_tasks() == 0
        assert live(Call) == calls
        # A later burst, its first reply held: each call has a task of its own
        # while it runs, and none is left once the burst is served.
        held.armed = True
        async with anyio.create_task_group() as tg:
            for i in range(10):
                tg.start_soon(host.embed, "m", [f"again {i}"])
            await held.wait_for(1)
            await anyio.wait_all_tasks_blocked()
            assert call_tasks() == 10
            held.armed = False
            await held.answer_all()
        await anyio.wait_all_tasks_blocked()
        assert call_tasks() == 0
        assert live(Call) == calls


@pytest.mark.subprocess
async def test_a_large_calls_memory_is_released_once_its_result_is_dropped(
    make_model: Any, make_config: Any
) -> None:
    """Measured with tracemalloc in the host process (the worker is a real
    subprocess, so its own caches are not counted)."""
    cfg = make_config(make_model("m", dims=64, max_batch=32))
    async with synapse.open_host(cfg, plugins=[transport_plugin(FakeTransport())]) as host:
        await host.embed("m", ["warm up"])
        texts = [f"text number {i} with a few words" for i in range(5000)]
        tracemalloc.start()
        try:
            gc.collect()
            base = tracemalloc.get_traced_memory()[0]
            result = await host.embed("m", texts)
            held = tracemalloc.get_traced_memory()[0] - base
            del result, texts
            gc.collect()
            kept = tracemalloc.get_traced_memory()[0] - base
        finally:
            tracemalloc.stop()
    assert held > 5_000_000  # the rows themselves: the measurement sees the call
    assert kept < held * 0.02, f"{kept} of {held} bytes still reachable"
