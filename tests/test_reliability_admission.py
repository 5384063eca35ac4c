"""Admission under bursts: ``max_waiting`` holds however calls arrive."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import synapse_core as synapse
from synapse_core.starting import Asked
from synapse_core.testing import transport_plugin
from synapse_core.testing.fake import InProcessFakeTransport
from synapse_core.wire import Infer

pytestmark = pytest.mark.anyio
HANG_GUARD_S = 10  # turns a hang into a failure; not a timing assertion


def _two_running_three_waiting(make_model: Any, make_config: Any, gate: Any) -> Any:
    """A host with 2 permits and room for 3 waiting calls, whose worker holds
    every inference reply until the gate opens."""
    transport = InProcessFakeTransport()
    transport.reply_gate = gate
    gate.armed = lambda model, frame: isinstance(frame, Infer)
    cfg = make_config(make_model("m"), max_concurrent=2, max_waiting=3)
    return synapse.open_host(cfg, plugins=[transport_plugin(transport)])


async def _outcome(host: synapse.Host, text: str, outcomes: list[object]) -> None:
    try:
        outcomes.append(await host.embed("m", [text]))
    except synapse.SynapseError as exc:
        outcomes.append(exc)


@pytest.mark.parametrize("ready", [True, False], ids=["warm", "cold"])
async def test_a_burst_in_one_tick_is_refused_beyond_max_waiting(
    make_model: Any, make_config: Any, gate: Any, ready: bool
) -> None:
    """200 calls started before any of them runs: 2 hold the permits, 3 wait,
    the other 195 are refused at once; the waiting count never passes 3."""
    outcomes: list[object] = []
    async with _two_running_three_waiting(make_model, make_config, gate) as host:
        if ready:
            await host.load("m")
        peak = 0
        with anyio.fail_after(HANG_GUARD_S):
            async with anyio.create_task_group() as tg:
                # Refusals are raised before the caller's first await: count
                # them as the burst is admitted, with no task switch between.
                for i in range(200):
                    try:
                        call = host._starts.now(Asked("m", "embed", [f"t{i}"], None, None, False))
                    except synapse.Overloaded as exc:
                        outcomes.append(exc)
                    else:
                        tg.start_soon(host._runner.wait, call)
                    peak = max(peak, host.backlog.waiting)
                refused = len(outcomes)
                await gate.arrived.wait()
                gate.armed = lambda model, frame: False
                gate.release.set()
        assert host.backlog.waiting == 0
        assert host.snapshot().worker("m").inflight == 0
    assert peak == 3
    assert refused == 195
    assert all(isinstance(o, synapse.Overloaded) for o in outcomes)
    assert "max_waiting = 3" in str(outcomes[0])


async def test_burst_of_callers_gets_exactly_max_waiting_queued(
    make_model: Any, make_config: Any, gate: Any
) -> None:
    """The same burst through the public API, each caller its own task."""
    outcomes: list[object] = []
    async with _two_running_three_waiting(make_model, make_config, gate) as host:
        await host.load("m")
        with anyio.fail_after(HANG_GUARD_S):
            async with anyio.create_task_group() as tg:
                for i in range(50):
                    tg.start_soon(_outcome, host, f"t{i}", outcomes)
                await anyio.wait_all_tasks_blocked()
                assert host.backlog.waiting == 3
                assert len(outcomes) == 45
                gate.armed = lambda model, frame: False
                gate.release.set()
    served = [o for o in outcomes if isinstance(o, synapse.EmbedResult)]
    refused = [o for o in outcomes if isinstance(o, synapse.Overloaded)]
    assert (len(served), len(refused)) == (5, 45)
    assert host.backlog.waiting == 0


async def test_a_call_refused_as_overloaded_creates_no_worker_record(
    make_model: Any, make_config: Any, gate: Any
) -> None:
    transport = InProcessFakeTransport()
    transport.reply_gate = gate
    gate.armed = lambda model, frame: isinstance(frame, Infer)
    cfg = make_config(make_model("busy"), make_model("idle"), max_concurrent=1, max_waiting=1)
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        await host.load("busy")
        with anyio.fail_after(HANG_GUARD_S):
            async with anyio.create_task_group() as tg:
                tg.start_soon(host.embed, "busy", ["holds the permit"])
                tg.start_soon(host.embed, "busy", ["waits for it"])
                await gate.arrived.wait()
                with pytest.raises(synapse.Overloaded):
                    await host.embed("idle", ["refused"])
                assert host.worker("idle") is None
                gate.armed = lambda model, frame: False
                gate.release.set()
        assert len(transport.launches) == 1


async def test_a_call_waiting_for_the_permit_keeps_its_place_when_the_permit_frees(
    make_model: Any, make_config: Any
) -> None:
    """First come, first served: a call counted as waiting for the permit is
    not overtaken by a later call when the permit frees before the waiting
    call's detached task has run (the later call neither takes the permit
    nor writes its request ahead of it)."""
    cfg = make_config(make_model("m"), max_concurrent=1)
    async with synapse.open_host(cfg, plugins=[transport_plugin(InProcessFakeTransport())]) as host:
        await host.embed("m", ["warm up"])
        runner = host._runner
        holder = object()
        runner.permits.acquire_on_behalf_of_nowait(holder)  # a call holds the only permit
        first = host._starts.now(Asked("m", "embed", ["first"], None, None, False))
        assert first.queued and not first.permit
        runner.permits.release_on_behalf_of(holder)  # freed before first's task runs
        second = host._starts.now(Asked("m", "embed", ["second"], None, None, False))
        assert second.queued and not second.permit and second.begun is None
        with anyio.fail_after(HANG_GUARD_S):
            await runner.wait(first)
            await runner.wait(second)
        assert (runner.permit_waiters, host.backlog.waiting) == (0, 0)
