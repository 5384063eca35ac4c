"""Residency supervisor contracts: reservations per (worker, shape), faults, retirement.

Each ``test_<check>`` here is a named check of the design: it fails against a
supervisor that skips the behaviour it names.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import synapse_core as synapse
from synapse_core.testing import eventually, transport_plugin
from synapse_core.testing.fake import InProcessFakeTransport
from synapse_core.wire import Admit, Infer

from .room_waits import to_just_before

pytestmark = pytest.mark.anyio

LANE = "fake:0"


def lane(host: synapse.Host) -> Any:
    return host.snapshot().lanes[LANE]


async def test_identical_models_in_distinct_workers_each_admit_their_own_shape(
    make_model: Any, make_config: Any
) -> None:
    transport = InProcessFakeTransport()
    cfg = make_config(make_model("a", package="same"), make_model("b", package="same"))
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        await host.embed("a", ["one two"])
        await host.embed("b", ["one two"])
        snap = lane(host)
        workers = {w.model: w for w in snap.workers}
        assert workers["a"].worker_id != workers["b"].worker_id
        assert workers["a"].pid != workers["b"].pid
        # Each worker admitted and pays for the same shape on its own.
        assert [(s.bucket, s.batch) for s in workers["a"].shapes] == [(8, 2)]
        assert [(s.bucket, s.batch) for s in workers["b"].shapes] == [(8, 2)]
        assert snap.reserved == workers["a"].shapes[0].units + workers["b"].shapes[0].units == 32
        admits = transport.frames("admit")
        assert sorted(r["model"] for r in admits) == ["a", "b"]
        assert len({r["pid"] for r in admits}) == 2
        assert host.snapshot().admissions == 2


async def test_serving_admission_channel_fault_restarts_exactly_once(
    make_model: Any, make_config: Any
) -> None:
    transport = InProcessFakeTransport()
    faults = {"crash_on_admit": 1, "only_generation": 1}
    cfg = make_config(make_model("m", faults=faults, buckets=[8, 16, 32]))
    texts = {8: "a", 16: "b " * 10, 32: "c " * 20}
    outcomes: list[BaseException | None] = []
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        await host.load("m")

        async def caller(bucket: int) -> None:
            try:
                await host.embed("m", [texts[bucket]])
                outcomes.append(None)
            except synapse.SynapseError as exc:
                outcomes.append(exc)

        async with anyio.create_task_group() as tg:
            for bucket in (8, 16, 32):
                tg.start_soon(caller, bucket)
        # Several callers saw the one fault of generation 1 ...
        faults_seen = [o for o in outcomes if isinstance(o, synapse.WorkerFault)]
        assert len(faults_seen) >= 2, outcomes
        await host.load("m")
        worker = host.snapshot().worker("m")
        # ... and it restarted exactly once.
        assert worker.generation == 2 and worker.restarts == 1
        assert [r.generation for r in transport.launched("m")] == [1, 2]
        assert (await host.embed("m", ["after"])).vectors


async def test_stale_serving_fault_after_recovery_does_not_restart_restored_owner(
    make_model: Any, make_config: Any
) -> None:
    transport = InProcessFakeTransport()
    cfg = make_config(make_model("m", faults={"crash_on_infer": 1, "only_generation": 1}))
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        with pytest.raises(synapse.OutcomeUnknown):
            await host.embed("m", ["boom"])
        await host.load("m")  # waits for the replacement
        worker = host.worker("m")
        assert worker is not None and worker.generation == 2
        supervisor = host.supervisors[LANE]
        # A fault report about generation 1 arrives after generation 2 took over.
        assert supervisor.report_fault(worker, 1, "late report from a stale exchange") is False
        snap = host.snapshot().worker("m")
        assert (snap.generation, snap.state, snap.restarts) == (2, "ready", 1)
        assert len(transport.launched("m")) == 2
        assert (await host.embed("m", ["fine"])).vectors
        assert host.snapshot().worker("m").generation == 2


async def test_retirement_between_precheck_and_grant_leaves_no_phantom_reservation(
    make_model: Any, make_config: Any, gate: Any
) -> None:
    transport = InProcessFakeTransport()
    transport.reply_gate = gate
    # Room for holder's 8x2 shape (16 units) but not also for waiter's 16x2 (32).
    cfg = make_config(make_model("holder"), make_model("waiter"), lanes={LANE: {"capacity": 40}})
    gate.armed = lambda model, frame: model == "holder" and isinstance(frame, Infer)
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        await host.load("waiter")
        results: dict[str, Any] = {}

        async def hold() -> None:
            results["holder"] = await host.embed("holder", ["x"])

        async def wait_for_room() -> None:
            try:
                await host.embed("waiter", ["y " * 10], deadline=synapse.Deadline.after(30))
            except synapse.SynapseError as exc:
                results["waiter"] = exc

        async with anyio.create_task_group() as tg:
            tg.start_soon(hold)
            await gate.arrived.wait()  # holder's lease and 16 units are taken
            tg.start_soon(wait_for_room)
            await eventually(lambda: host.backlog.waiting == 1)  # past its pre-checks
            admissions = host.snapshot().admissions
            tg.start_soon(host.retire, "waiter")
            await eventually(lambda: host.worker("waiter").retiring)  # type: ignore[union-attr]
            gate.release.set()  # room appears while the waiter's model is retiring
        assert isinstance(results["waiter"], synapse.Retired)
        assert host.snapshot().admissions == admissions
        assert transport.frames("admit", model="waiter") == []
        snap = lane(host)
        assert snap.reserved == 16
        assert host.snapshot().worker("waiter").state == "exited"


async def test_retirement_during_exit_confirmation_never_connects_replacement(
    make_model: Any, make_config: Any
) -> None:
    transport = InProcessFakeTransport()
    transport.hold_exits = True
    cfg = make_config(make_model("m", faults={"crash_on_infer": 1}), exit_grace_s=30.0)
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        with pytest.raises(synapse.OutcomeUnknown):
            await host.embed("m", ["boom"])
        process = transport.launched("m")[0].process
        await eventually(lambda: process.terminated)  # recovery awaits exit
        assert host.snapshot().worker("m").state == "recovering"
        assert lane(host).reserved == 16  # still charged: exit not confirmed
        async with anyio.create_task_group() as tg:
            tg.start_soon(host.retire, "m")
            await eventually(lambda: host.worker("m").retiring)  # type: ignore[union-attr]
            process.confirm_exit()
        assert len(transport.launched("m")) == 1
        assert len(transport.frames("hello", model="m")) == 1
        snap = host.snapshot().worker("m")
        assert snap.state == "exited"
        assert lane(host).reserved == 0


async def test_serving_io_fault_recovers_and_retire_refunds_only_after_exit(
    make_model: Any, make_config: Any
) -> None:
    transport = InProcessFakeTransport()
    transport.hold_exits = True
    faults = {"crash_on_infer": 1, "only_generation": 1}
    cfg = make_config(make_model("m", faults=faults), exit_grace_s=30.0)
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        with pytest.raises(synapse.OutcomeUnknown):
            await host.embed("m", ["boom"])
        first = transport.launched("m")[0].process
        await eventually(lambda: first.terminated)
        assert lane(host).reserved == 16  # not refunded before exit is confirmed
        first.confirm_exit()
        await host.load("m")
        result = await host.embed("m", ["works now"])
        assert len(result.vectors) == 1
        # The exchange that may have run was not replayed on generation 2.
        infers = transport.frames("infer", model="m")
        assert [r["generation"] for r in infers] == [1, 2]
        assert len({r["request_id"] for r in infers}) == 2

        second = transport.launched("m")[1].process
        async with anyio.create_task_group() as tg:
            tg.start_soon(host.retire, "m")
            await eventually(lambda: second.exited)  # shut down, exit not yet confirmed
            snap = host.snapshot().worker("m")
            assert snap.state == "retiring"
            assert lane(host).reserved == 16  # charged until exit is confirmed
            second.confirm_exit()
        assert host.snapshot().worker("m").state == "exited"
        assert lane(host).reserved == 0


async def test_unconfirmed_exit_keeps_reservations_charged(
    make_model: Any, make_config: Any
) -> None:
    transport = InProcessFakeTransport()
    transport.hold_exits = True
    cfg = make_config(make_model("m"), exit_grace_s=0.05)
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        await host.embed("m", ["x"])
        await host.retire("m")
        snap = host.snapshot().worker("m")
        assert snap.state == "exit_unconfirmed"
        assert "did not exit" in snap.reason
        assert lane(host).reserved == 16
        process = transport.launched("m")[0].process
        assert process.terminated and process.killed


async def test_restart_budget_stops_a_crash_loop(make_model: Any, make_config: Any) -> None:
    transport = InProcessFakeTransport()
    cfg = make_config(
        make_model("m", faults={"crash_on_infer": 1}),
        restart_budget={"max_restarts": 2, "window_s": 3600.0},
    )
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        for _ in range(3):
            with pytest.raises(synapse.OutcomeUnknown):
                await host.embed("m", ["boom"])
            worker = host.worker("m")
            assert worker is not None
            while worker.state == "recovering":
                await worker.changed()
        snap = host.snapshot().worker("m")
        assert snap.state == "failed"
        assert "giving up" in snap.reason
        with pytest.raises(synapse.WorkerFault, match="giving up"):
            await host.embed("m", ["again"])
        assert len(transport.launched("m")) == 3


async def test_lane_full_waits_then_capacity_exhausted(
    make_model: Any, make_config: Any, gate: Any
) -> None:
    # No deadline passes before b waits for room (see room_waits).
    clock = synapse.FakeClock()
    transport = InProcessFakeTransport()
    transport.reply_gate = gate
    gate.armed = lambda model, frame: model == "a" and isinstance(frame, Infer)
    cfg = make_config(make_model("a"), make_model("b"), lanes={LANE: {"capacity": 20}})
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)], clock=clock) as host:
        await host.load("b")
        deadline = synapse.Deadline(clock() + 100)
        outcome: list[Exception] = []

        async def b() -> None:
            try:
                await host.embed("b", ["y"], deadline=deadline)
            except synapse.SynapseError as exc:
                outcome.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(host.embed, "a", ["x"])
            await gate.arrived.wait()
            tg.start_soon(b)
            await eventually(lambda: host.backlog.waiting == 1)  # waiting for room
            to_just_before(clock, deadline.when, host, "b")
            await eventually(lambda: len(outcome) == 1)
            gate.release.set()
        [exhausted] = outcome
        assert isinstance(exhausted, synapse.CapacityExhausted) and "no room" in str(exhausted)
        assert lane(host).reserved == 16
        # b gave up at its deadline and charged nothing.
        assert [w.shapes for w in lane(host).workers if w.model == "b"] == [[]]


async def test_shape_larger_than_lane_is_refused_at_once(make_model: Any, make_config: Any) -> None:
    transport = InProcessFakeTransport()
    cfg = make_config(make_model("a"), lanes={LANE: {"capacity": 10}})
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        with pytest.raises(synapse.CapacityExhausted, match="has only 10"):
            await host.embed("a", ["x"])
        assert lane(host).reserved == 0
        assert transport.frames("admit") == []


async def test_grant_admits_each_shape_once_under_concurrency(
    make_model: Any, make_config: Any
) -> None:
    transport = InProcessFakeTransport()
    cfg = make_config(make_model("a"))
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        async with anyio.create_task_group() as tg:
            for i in range(10):
                tg.start_soon(host.embed, "a", [f"text {i}"])
        assert len([f for f in transport.frames("admit") if f["shape"] == [8, 2]]) == 1
        assert lane(host).reserved == 16
        assert host.snapshot().worker("a").leases == 0


def _is_admit(model: str, frame: Any) -> bool:
    return isinstance(frame, Admit)


async def test_full_lane_evicts_least_recently_used_unleased_shape(
    make_model: Any, make_config: Any
) -> None:
    transport = InProcessFakeTransport()
    # Room for two 8x2 shapes (16 units each), not three.
    cfg = make_config(
        make_model("a"), make_model("b"), make_model("c"), lanes={LANE: {"capacity": 40}}
    )
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        await host.embed("a", ["x"])
        await host.embed("b", ["x"])
        await host.embed("a", ["x"])  # b's shape is now the least recently used
        await host.embed("c", ["x"])
        evicts = transport.frames("evict")
        assert [(e["model"], e["shape"]) for e in evicts] == [("b", [8, 2])]
        workers = {w.model: w for w in lane(host).workers}
        assert workers["b"].shapes == []
        assert lane(host).reserved == 32
        # b comes back by evicting in turn; nothing is ever over capacity.
        await host.embed("b", ["x"])
        assert lane(host).reserved == 32
        assert [e["model"] for e in transport.frames("evict")] == ["b", "a"]
