"""Direct-ANE serving checks named in the design, on the in-process simulated variant.

The in-process workers still take the real lane lock (in ``tmp_path``). Each
exchange can be held at a reply gate, and time is a :class:`FakeClock`, so
every ordering below is exact rather than timed.
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from synapse_ane_direct.inprocess import InProcessAneTransport, ReplyGate
from synapse_core import (
    Deadline,
    DeadlineExceeded,
    FakeClock,
    Host,
    HostConfig,
    LaneLocked,
    SynapseError,
    open_host,
)
from synapse_core.snapshot import ShapeSnapshot
from synapse_core.testing import host_config, model_entry, transport_plugin
from synapse_core.wire import Admit, Infer

pytestmark = pytest.mark.anyio

M = "ane-e"
SHORT = "short text"  # 4 positions: bucket 16
LONG = " ".join(f"w{i}" for i in range(20))  # 22 positions: bucket 32
#: Guards against a hang only; nothing below waits on real time.
HANG_GUARD_S = 10


def _config(**settings: object) -> HostConfig:
    model = model_entry(
        M, transport="ane-direct", package="ane-test", buckets=[16, 32], dims=16, max_batch=2
    )
    return host_config(model, **settings)


async def _drained(host: Host) -> None:
    """Wait (no timing) until no call is in flight on the model's worker."""
    worker = host.worker(M)
    assert worker is not None
    while worker.inflight:
        await worker.changed()


async def _call_with_outcome(host: Host, deadline: Deadline, outcome: dict[str, object]) -> None:
    try:
        outcome["result"] = await host.embed(M, [SHORT], deadline=deadline)
    except SynapseError as exc:
        outcome["error"] = exc


async def test_cancelled_direct_ane_keeps_module_permit_and_inflight_until_reply_drains(
    tmp_path: Path,
) -> None:
    transport = InProcessAneTransport(tmp_path)
    fake = FakeClock()
    with anyio.fail_after(HANG_GUARD_S):
        config = _config(max_concurrent=1)
        async with open_host(config, plugins=[transport_plugin(transport)], clock=fake) as host:
            await host.load(M)
            gate = ReplyGate(Infer)
            transport.reply_gate = gate
            async with anyio.create_task_group() as caller:
                # Two groups: bucket 16 (SHORT) runs first, then bucket 32 (LONG).
                caller.start_soon(host.embed, M, [LONG, SHORT])
                await gate.held.wait()
                caller.cancel_scope.cancel()
            # The caller is gone; its first group's reply is still held.
            held = host.snapshot().worker(M)
            assert held.inflight == 1
            assert held.leases == 1
            permits = host._runner.permits
            assert permits.borrowed_tokens == 1
            with pytest.raises(anyio.WouldBlock):
                permits.acquire_nowait()  # a second call cannot get the module permit

            gate.open()
            await _drained(host)
            after = host.snapshot().worker(M)
            assert after.inflight == 0 and after.leases == 0
            assert permits.borrowed_tokens == 0
            assert (after.generation, after.state, after.restarts) == (1, "ready", 0)
            assert len(transport.launches) == 1
            # Only the first group ran: the 32 bucket was never admitted nor inferred.
            assert [r["shape"] for r in transport.frames("infer", M)] == [[16, 2]]
            assert [r["shape"] for r in transport.frames("admit", M)] == [[16, 2]]
            # The drained worker is healthy and serves the next call.
            assert len((await host.embed(M, [SHORT])).vectors) == 1
            assert host.snapshot().worker(M).generation == 1


async def test_direct_ane_warm_reply_after_absolute_deadline_is_discarded(tmp_path: Path) -> None:
    transport = InProcessAneTransport(tmp_path)
    fake = FakeClock()
    with anyio.fail_after(HANG_GUARD_S):
        async with open_host(_config(), plugins=[transport_plugin(transport)], clock=fake) as host:
            await host.embed(M, [SHORT])  # admits the 16 bucket: now warm
            assert len(transport.frames("admit", M)) == 1
            gate = ReplyGate(Infer)
            transport.reply_gate = gate
            outcome: dict[str, object] = {}
            async with anyio.create_task_group() as tg:
                tg.start_soon(_call_with_outcome, host, Deadline.after(60, clock=fake), outcome)
                await gate.held.wait()
                fake.advance(61)  # the absolute deadline passes while the reply is held
                gate.open()
            assert "result" not in outcome
            assert isinstance(outcome.get("error"), DeadlineExceeded)
            # The inference did run (warm, no new admission); its reply was discarded.
            assert len(transport.frames("infer", M)) == 2
            assert len(transport.frames("admit", M)) == 1
            await _drained(host)
            worker = host.snapshot().worker(M)
            assert (worker.generation, worker.state, worker.restarts) == (1, "ready", 0)
            assert len(transport.launches) == 1


async def test_direct_ane_cold_admission_after_absolute_deadline_is_drained_without_inference(
    tmp_path: Path,
) -> None:
    transport = InProcessAneTransport(tmp_path)
    fake = FakeClock()
    with anyio.fail_after(HANG_GUARD_S):
        async with open_host(_config(), plugins=[transport_plugin(transport)], clock=fake) as host:
            await host.load(M)
            gate = ReplyGate(Admit)
            transport.reply_gate = gate
            outcome: dict[str, object] = {}
            async with anyio.create_task_group() as tg:
                tg.start_soon(_call_with_outcome, host, Deadline.after(60, clock=fake), outcome)
                await gate.held.wait()
                fake.advance(61)  # the deadline passes during the cold compile
                gate.open()
            assert "result" not in outcome
            assert isinstance(outcome.get("error"), DeadlineExceeded)
            admits = transport.frames("admit", M)
            assert [(r["shape"], r["cold"]) for r in admits] == [([16, 2], True)]
            assert transport.frames("infer", M) == []  # no inference was sent
            await _drained(host)
            worker = host.snapshot().worker(M)
            # The drained admission stays admitted and charged to this worker.
            assert worker.shapes == [ShapeSnapshot(16, 2, 32)]
            assert host.snapshot().lanes["ane:0"].reserved == 32
            assert (worker.generation, worker.state, worker.restarts) == (1, "ready", 0)
            assert worker.leases == 0
            assert len(transport.launches) == 1


# -- two hosts on one lane ----------------------------------------------------------


async def test_second_host_first_load_on_a_locked_lane_raises_lane_locked(tmp_path: Path) -> None:
    first, second = InProcessAneTransport(tmp_path), InProcessAneTransport(tmp_path)
    error: SynapseError | None = None
    with anyio.fail_after(HANG_GUARD_S):
        async with open_host(_config(), plugins=[transport_plugin(first)]) as host_a:
            await host_a.load(M)
            async with open_host(_config(), plugins=[transport_plugin(second)]) as host_b:
                try:
                    await host_b.load(M)
                except SynapseError as exc:
                    error = exc
    assert isinstance(error, LaneLocked), repr(error)
    assert f"pid {os.getpid()}" in str(error)


async def test_second_host_is_refused_at_once_and_the_holder_is_left_alone(tmp_path: Path) -> None:
    first, second = InProcessAneTransport(tmp_path), InProcessAneTransport(tmp_path)
    with anyio.fail_after(HANG_GUARD_S):
        async with open_host(_config(), plugins=[transport_plugin(second)]) as host_b:
            async with open_host(_config(), plugins=[transport_plugin(first)]) as host_a:
                await host_a.load(M)
                with pytest.raises(SynapseError) as info:
                    await host_b.load(M)  # no deadline: it must fail, not wait
                message = str(info.value)
                assert f"lane ane:0 is held by pid {os.getpid()}" in message
                assert "never kills a holder or bypasses a live lane lock" in message
                assert second.launches == []  # the second host started no worker
                # The holder was not disturbed.
                assert len((await host_a.embed(M, [SHORT])).vectors) == 1
                holder = host_a.snapshot().worker(M)
                assert (holder.generation, holder.state) == (1, "ready")
                assert first.launches[0].process.terminated is False
            # The first host is gone and its worker exited: the lane is free again.
            await host_b.load(M)
            assert host_b.snapshot().worker(M).state == "ready"
            assert len(second.launches) == 1
