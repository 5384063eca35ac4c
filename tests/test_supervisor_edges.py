"""Edge cases of the supervisor found in review: cancellation during a start,
a worker that stops reading, eviction racing retirement, a queued call and
retirement, admissions after the deadline, and load during retirement."""

from __future__ import annotations

import contextlib
from typing import Any

import anyio
import pytest
from anyio.abc import ByteReceiveStream, ByteSendStream

import synapse_core as synapse
from synapse_core.hookspecs import hookimpl
from synapse_core.residency.policy import Wait
from synapse_core.testing import eventually, transport_plugin
from synapse_core.testing.fake import InProcessFakeTransport
from synapse_core.transport import Launched, LaunchRequest
from synapse_core.wire import AnyFrame, Codec, Evict, Failure, Infer

pytestmark = pytest.mark.anyio
HANG_GUARD_S = 10  # turns a hang into a failure; not a timing assertion


class SlowLaunch(InProcessFakeTransport):
    """``launch`` waits until the test lets it go (a slow spawn)."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = anyio.Event()
        self.go = anyio.Event()

    async def launch(self, request: LaunchRequest) -> Launched:
        self.entered.set()
        await self.go.wait()
        return await super().launch(request)


class StuckSend(ByteSendStream):
    """The host end of a pipe whose worker stopped reading: sends never finish."""

    def __init__(self, inner: ByteSendStream) -> None:
        self.inner = inner

    async def send(self, item: bytes) -> None:
        await anyio.sleep_forever()

    async def aclose(self) -> None:
        await self.inner.aclose()


class StopsReading(InProcessFakeTransport):
    async def launch(self, request: LaunchRequest) -> Launched:
        launched = await super().launch(request)
        if request.generation == 1:
            return Launched(StuckSend(launched.send), launched.receive, launched.process)
        return launched


class Recorder:
    def __init__(self) -> None:
        self.events: list[Any] = []

    @hookimpl
    def synapse_observe(self, event: Any) -> None:
        self.events.append(event)


class AlwaysWait:
    @hookimpl
    def synapse_lane_full(self, request: Any, lane: Any) -> Any:
        return Wait()


async def quietly(coro: Any) -> None:
    with contextlib.suppress(synapse.SynapseError):
        await coro


async def test_cancelling_the_host_during_a_worker_start_still_closes(
    make_model: Any, make_config: Any
) -> None:
    transport = SlowLaunch()
    hosts: list[synapse.Host] = []
    with anyio.fail_after(HANG_GUARD_S):
        with anyio.CancelScope() as outer:
            async with synapse.open_host(
                make_config(make_model("m")), plugins=[transport_plugin(transport)]
            ) as host:
                hosts.append(host)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(host.load, "m")
                    await transport.entered.wait()
                    outer.cancel()  # Ctrl-C, or an enclosing timeout
    assert outer.cancelled_caught
    assert hosts[0].snapshot().worker("m").state in ("exited", "failed")


async def test_a_send_that_never_finishes_is_a_fault_bounded_by_the_exchange_timeout(
    make_model: Any, make_config: Any
) -> None:
    transport = StopsReading()
    cfg = make_config(make_model("m"), exchange_timeout_s=0.2)
    with anyio.fail_after(HANG_GUARD_S):
        async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
            # The admit frame is the first send: it never completes.
            with pytest.raises(synapse.WorkerFault):
                await host.embed("m", ["x"])
            await host.load("m")
            assert host.snapshot().worker("m").generation == 2
            assert (await host.embed("m", ["x"])).vectors


async def test_eviction_racing_retirement_does_not_start_a_recovery(
    make_model: Any, make_config: Any, gate: Any
) -> None:
    transport = InProcessFakeTransport()
    transport.reply_gate = gate
    gate.armed = lambda model, frame: isinstance(frame, Evict)
    recorder = Recorder()
    cfg = make_config(
        make_model("a"), make_model("b"), lanes={"fake:0": {"capacity": 20}}, exit_grace_s=0.5
    )
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport), recorder]) as host:
        await host.embed("b", ["x"])
        await host.load("a")
        async with anyio.create_task_group() as tg:
            tg.start_soon(quietly, host.embed("a", ["x"]))
            await gate.arrived.wait()  # a is evicting b's shape
            await host.retire("b")  # b has no call in flight: retirement goes ahead
            gate.release.set()
        kinds = [type(e).__name__ for e in recorder.events if e.worker_id.startswith("b#")]
    assert "WorkerFaulted" not in kinds
    assert kinds.count("WorkerExited") == 1


async def test_retirement_is_not_held_up_by_a_call_queued_for_a_permit(
    make_model: Any, make_config: Any
) -> None:
    transport = InProcessFakeTransport()
    cfg = make_config(
        make_model("x"), make_model("y"), lanes={"fake:0": {"capacity": 16}}, max_concurrent=1
    )
    plugins = [transport_plugin(transport), AlwaysWait()]
    async with synapse.open_host(cfg, plugins=plugins) as host:
        await host.embed("x", ["a"])  # x's shape takes the whole lane, unleased
        await host.load("y")
        async with anyio.create_task_group() as tg:
            # y holds the only permit and waits for room only x's retirement frees.
            tg.start_soon(quietly, host.embed("y", ["a"], deadline=synapse.Deadline.after(30)))
            await eventually(lambda: host.backlog.waiting == 1)
            tg.start_soon(quietly, host.embed("x", ["b"]))  # queued for the permit
            await eventually(lambda: host.backlog.waiting == 2)
            with anyio.fail_after(HANG_GUARD_S):
                await host.retire("x")
        assert host.snapshot().worker("x").state == "exited"
        assert host.snapshot().worker("y").shapes  # y got its room


async def test_no_admission_starts_after_the_deadline(
    make_model: Any, make_config: Any, gate: Any
) -> None:
    # The deadline passes (on a FakeClock) while the eviction is held.
    clock = synapse.FakeClock()
    transport = InProcessFakeTransport()
    transport.reply_gate = gate
    gate.armed = lambda model, frame: isinstance(frame, Evict)
    cfg = make_config(make_model("a"), make_model("b"), lanes={"fake:0": {"capacity": 20}})
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)], clock=clock) as host:
        await host.embed("b", ["x"])  # b's shape: 16 of 20 units, unleased
        await host.load("a")
        outcome: list[Exception] = []

        async def a() -> None:
            try:
                await host.embed("a", ["x"], deadline=synapse.Deadline(clock() + 100))
            except synapse.SynapseError as exc:
                outcome.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(a)
            await gate.arrived.wait()  # the eviction is under way
            clock.advance(200)
            gate.release.set()
        [late] = outcome
        assert isinstance(late, synapse.DeadlineExceeded) and "nothing was sent" in str(late)
        await eventually(lambda: host.snapshot().worker("a").inflight == 0)
        assert transport.frames("evict", model="b") and transport.frames("admit", model="a") == []


async def test_load_during_retirement_waits_and_serves_from_a_fresh_worker(
    make_model: Any, make_config: Any, gate: Any
) -> None:
    transport = InProcessFakeTransport()
    transport.reply_gate = gate
    gate.armed = lambda model, frame: isinstance(frame, Infer)
    async with synapse.open_host(
        make_config(make_model("m")), plugins=[transport_plugin(transport)]
    ) as host:
        async with anyio.create_task_group() as tg:
            tg.start_soon(host.embed, "m", ["x"])
            await gate.arrived.wait()
            tg.start_soon(host.retire, "m")
            await eventually(lambda: host.worker("m").retiring)  # type: ignore[union-attr]
            loaded = anyio.Event()
            states: list[str] = []

            async def load() -> None:
                await host.load("m")
                states.append(host.snapshot().worker("m").state)
                loaded.set()

            tg.start_soon(load)
            gate.armed = lambda model, frame: False
            gate.release.set()
            await loaded.wait()
        assert states == ["ready"]  # not the draining worker, which was "retiring"
        assert (await host.embed("m", ["y"])).vectors
        assert len(transport.launched("m")) == 2


async def test_a_worker_that_faults_while_retiring_is_stopped_without_a_polite_wait(
    make_model: Any, make_config: Any
) -> None:
    transport = InProcessFakeTransport()
    # A polite wait would take exit_grace_s (30 s); the hang guard is far shorter.
    cfg = make_config(
        make_model("m", faults={"hang_on_infer": 1}), exchange_timeout_s=0.2, exit_grace_s=30.0
    )
    with anyio.fail_after(HANG_GUARD_S):
        async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
            await host.load("m")
            async with anyio.create_task_group() as tg:
                tg.start_soon(quietly, host.embed("m", ["hangs"]))
                await eventually(lambda: len(transport.frames("infer")) == 1)
                await host.retire("m")  # the drain ends in an exchange timeout
            snap = host.snapshot().worker("m")
            assert snap.state == "exited" and snap.restarts == 0
            assert transport.launched("m")[0].process.terminated


async def test_a_call_made_as_the_host_closes_ends_instead_of_holding_up_the_close(
    make_model: Any, make_config: Any
) -> None:
    """The task owning the host is cancelled while another task still calls it:
    the call's head start took the permit, the in-flight count, a lease and
    the channel's turn for a detached task started in a group already
    cancelled. It must end and let go of them, or the host's close waits for
    it forever."""
    cfg = make_config(make_model("m"))
    ready = anyio.Event()
    owner_scope = anyio.CancelScope()
    held: dict[str, Any] = {}
    closed = anyio.Event()

    async def owner() -> None:
        with owner_scope:
            async with synapse.open_host(
                cfg, plugins=[transport_plugin(InProcessFakeTransport())]
            ) as host:
                held["host"] = host
                await host.embed("m", ["warm up"])
                held["worker"] = host.worker("m")
                ready.set()
                await anyio.sleep_forever()
        closed.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(owner)
        await ready.wait()
        worker = held["worker"]
        owner_scope.cancel()
        try:
            with pytest.raises(synapse.SynapseError):
                deadline = synapse.Deadline.after(HANG_GUARD_S)
                await held["host"].embed("m", ["a call as the host closes"], deadline=deadline)
            await eventually(lambda: worker.inflight == 0, timeout=HANG_GUARD_S)
        finally:
            if worker.inflight:
                # Leaked: free it so the host's close can finish and the
                # failure above is reported instead of a hang.
                worker.inflight = 0
                worker.notify()
        with anyio.fail_after(HANG_GUARD_S):
            await closed.wait()
    assert not any(worker.leases.values())
    assert worker.state == "exited"


async def test_a_close_held_up_past_its_bounds_stops_the_workers_outright(
    make_model: Any, make_config: Any
) -> None:
    """Retirement waits for in-flight calls; if one never lets go (a bug), the
    close still ends once every bound is spent, and the worker is stopped."""
    transport = InProcessFakeTransport()
    transport.hold_exits = False
    cfg = make_config(make_model("m"), exchange_timeout_s=0.2, exit_grace_s=0.2)
    held: dict[str, Any] = {}
    closed = anyio.Event()

    async def owner() -> None:
        async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
            await host.embed("m", ["warm up"])
            worker = held["worker"] = host.worker("m")
            held["host"] = host
            assert worker is not None
            held["guard"] = worker.enter(False)  # a call that never leaves
        closed.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(owner)
        with anyio.move_on_after(HANG_GUARD_S) as guard:
            await closed.wait()
        if guard.cancelled_caught:
            # The close is shielded: let the call go so the host can close
            # and this failure is reported instead of a hang.
            held["worker"].leave(held["guard"])
            pytest.fail("the host's close was not bounded")
    worker, host = held["worker"], held["host"]
    assert worker.state == "exited"
    assert host.snapshot().lanes["fake:0"].reserved == 0
    (record,) = transport.launched("m")
    assert record.process.exited


class StaleFailureFirst(ByteReceiveStream):
    """The host end of a worker's pipe that delivers a stale reply (a failure
    for some earlier request) just before the first reply after the hello."""

    def __init__(self, inner: ByteReceiveStream) -> None:
        self.inner = inner
        self.reads = 0

    async def receive(self, max_bytes: int = 65536) -> bytes:
        data = await self.inner.receive(max_bytes)
        self.reads += 1
        if self.reads == 2:
            stale = Failure(999_999, "stale", "an old request's failure")
            data = Codec(AnyFrame).encode(stale) + data
        return data

    async def aclose(self) -> None:
        await self.inner.aclose()


class StaleReplyTransport(InProcessFakeTransport):
    async def launch(self, request: LaunchRequest) -> Launched:
        launched = await super().launch(request)
        if request.generation == 1:
            return Launched(launched.send, StaleFailureFirst(launched.receive), launched.process)
        return launched


async def test_a_reply_to_another_request_is_a_fault_not_a_refusal(
    make_model: Any, make_config: Any
) -> None:
    """A stale failure read as the reply to an admission must not refund a
    shape the worker may hold: it is a fault of that generation."""
    transport = StaleReplyTransport()
    cfg = make_config(make_model("m"))
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        with pytest.raises(synapse.WorkerFault, match="not for request"):
            await host.embed("m", ["x"])
        await host.load("m")
        assert (await host.embed("m", ["x"])).vectors
        snap = host.snapshot().worker("m")
        assert (snap.generation, snap.restarts) == (2, 1)


async def test_a_lease_watch_is_told_of_each_lease_once(make_model: Any, make_config: Any) -> None:
    seen: list[tuple[str, int]] = []

    class Watch:
        def granted(self, lease: Any) -> None:
            seen.append(("granted", lease.shape.bucket))

        def released(self, lease: Any) -> None:
            seen.append(("released", lease.shape.bucket))

    cfg = make_config(make_model("m", buckets=[8, 16]))
    transport = InProcessFakeTransport()
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        await host.load("m")
        supervisor = host.supervisors["fake:0"]
        supervisor.watch_leases(Watch())
        await host.embed("m", ["short", "a longer text " * 3])
        # One lease at a time, smallest bucket first, each released once.
        assert seen == [("granted", 8), ("released", 8), ("granted", 16), ("released", 16)]
        supervisor.watch_leases(None)
        await host.embed("m", ["short"])
        assert len(seen) == 4


async def test_a_lease_that_fails_after_its_request_left_recovers_the_worker(
    make_model: Any, make_config: Any
) -> None:
    """The head start writes before it records the lease: if recording fails,
    the reply already on its way must not be read as the next call's."""

    class Broken:
        def granted(self, lease: Any) -> None:
            raise RuntimeError("watch broke")

        def released(self, lease: Any) -> None:
            pass

    cfg = make_config(make_model("m"))
    async with synapse.open_host(cfg, plugins=[transport_plugin(InProcessFakeTransport())]) as host:
        assert (await host.embed("m", ["warm the shape"])).vectors
        supervisor = host.supervisors["fake:0"]
        supervisor.watch_leases(Broken())
        with pytest.raises(synapse.SynapseError, match="watch broke"):
            await host.embed("m", ["x"])
        supervisor.watch_leases(None)
        with anyio.fail_after(10):
            assert (await host.embed("m", ["y"])).vectors
        snap = host.snapshot().worker("m")
        assert (snap.generation, snap.restarts, snap.inflight) == (2, 1, 0)
