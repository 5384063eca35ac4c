"""Coalescing: small embed calls waiting for a busy model share one request."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

import synapse_core as synapse
from synapse_core.call import Call, Coalesced
from synapse_core.plan import Item, Plan
from synapse_core.plugins import PluginHost
from synapse_core.residency.lane import Backlog
from synapse_core.serving import CallRunner
from synapse_core.starting import Starts
from synapse_core.testing import eventually, transport_plugin
from synapse_core.testing.fake import InProcessFakeTransport
from synapse_core.testing.fake_worker import FakeWorker, fake_vector
from synapse_core.tokenizer import VOCAB, BasicTokenizer
from synapse_core.transport import Launched, LaunchRequest
from synapse_core.wire import Infer

from .room_waits import to_just_before

pytestmark = pytest.mark.anyio

#: what each queued caller embeds: one or two short texts (all in bucket 8)
QUEUED = [["b"], ["c", "d"], ["e"], ["f", "g"], ["h"]]


def expected(text: str, dims: int = 4) -> list[float]:
    return fake_vector(BasicTokenizer().encode(text), dims)


class Held:
    """A host whose worker holds the first inference reply until released,
    so that calls made meanwhile queue behind it."""

    def __init__(self, host: synapse.Host, gate: Any, tg: Any) -> None:
        self.host, self.gate, self.tg = host, gate, tg
        self.results: dict[int, Any] = {}

    def call(self, index: int, texts: list[str], **kwargs: Any) -> None:
        async def run() -> None:
            try:
                self.results[index] = await self.host.embed("m", texts, **kwargs)
            except synapse.SynapseError as exc:
                self.results[index] = exc

        self.tg.start_soon(run)

    async def queue(self, calls: list[list[str]]) -> None:
        self.call(0, ["a"])
        await self.gate.arrived.wait()
        for index, texts in enumerate(calls, 1):
            self.call(index, texts)
        await eventually(lambda: self.host.backlog.waiting == len(calls))

    def release(self) -> None:
        self.gate.armed = lambda model, frame: False
        self.gate.release.set()


async def serve_held(
    make_model: Any,
    make_config: Any,
    gate: Any,
    body: Callable[[Held, InProcessFakeTransport], Awaitable[None]],
    transport: InProcessFakeTransport | None = None,
    **settings: Any,
) -> InProcessFakeTransport:
    transport = transport or InProcessFakeTransport()
    transport.reply_gate = gate
    settings.setdefault("coalesce", True)
    cfg = make_config(make_model("m", max_batch=8), **settings)
    plugins = [transport_plugin(transport)]
    async with synapse.open_host(cfg, plugins=plugins) as host:
        await host.load("m")
        gate.armed = lambda model, frame: isinstance(frame, Infer)
        async with anyio.create_task_group() as tg:
            await body(Held(host, gate, tg), transport)
        snapshot = host.snapshot().worker("m")
        assert (snapshot.inflight, snapshot.leases, host.backlog.waiting) == (0, 0, 0)
    return transport


async def test_queued_calls_share_one_request_and_each_gets_its_own_rows(
    make_model: Any, make_config: Any, gate: Any
) -> None:
    async def body(held: Held, transport: InProcessFakeTransport) -> None:
        await held.queue(QUEUED)
        held.release()

    transport = await serve_held(make_model, make_config, gate, body)
    # The first call alone, then every queued call's texts in one request.
    assert len(transport.frames("infer")) == 2


async def test_each_caller_gets_its_own_rows_in_its_own_order(
    make_model: Any, make_config: Any, gate: Any
) -> None:
    held_box: list[Held] = []

    async def body(held: Held, transport: InProcessFakeTransport) -> None:
        held_box.append(held)
        await held.queue(QUEUED)
        held.release()

    await serve_held(make_model, make_config, gate, body)
    results = held_box[0].results
    for index, texts in enumerate(QUEUED, 1):
        result = results[index]
        assert result.vectors == [pytest.approx(expected(t), abs=1e-6) for t in texts]
        assert result.identity == "fake:pkg-m:d4"
        assert result.tokens == len(texts)


async def test_without_coalescing_each_call_is_its_own_request(
    make_model: Any, make_config: Any, gate: Any
) -> None:
    async def body(held: Held, transport: InProcessFakeTransport) -> None:
        held.call(0, ["a"])
        await gate.arrived.wait()
        for index, texts in enumerate(QUEUED, 1):
            held.call(index, texts)
        await eventually(lambda: held.host.snapshot().worker("m").inflight == len(QUEUED) + 1)
        held.release()

    transport = await serve_held(make_model, make_config, gate, body, coalesce=False)
    assert len(transport.frames("infer")) == len(QUEUED) + 1


async def test_a_coalesced_call_takes_at_most_one_batch(
    make_model: Any, make_config: Any, gate: Any
) -> None:
    # Twelve texts wait, the batch is 8: two coalesced calls.
    calls = [["t"], ["u", "v"], ["w"], ["x", "y"], ["z"], ["q", "r"], ["s"], ["o", "p"]]

    async def body(held: Held, transport: InProcessFakeTransport) -> None:
        await held.queue(calls)
        held.release()

    transport = await serve_held(make_model, make_config, gate, body)
    # (Which calls share a request depends on the order the tasks arrived in.)
    first, *coalesced = [frame["rows"] for frame in transport.frames("infer")]
    assert first == 1 and len(coalesced) == 2
    assert max(coalesced) <= 8 and sum(coalesced) == 12


async def test_a_refusal_stays_with_its_caller(
    make_model: Any, make_config: Any, gate: Any
) -> None:
    held_box: list[Held] = []

    async def body(held: Held, transport: InProcessFakeTransport) -> None:
        held_box.append(held)
        await held.queue(QUEUED[:2])
        with pytest.raises(synapse.Refused) as refused:
            await held.host.embed("m", ["ok", "word " * 300])
        assert (refused.value.code, refused.value.index) == ("over-ceiling", 1)
        held.release()

    await serve_held(make_model, make_config, gate, body)
    assert all(isinstance(r, synapse.EmbedResult) for r in held_box[0].results.values())


async def test_a_fault_in_a_shared_request_reaches_every_caller_and_is_not_replayed(
    make_model: Any, make_config: Any, gate: Any
) -> None:
    transport = InProcessFakeTransport()
    transport.reply_gate = gate
    # The second inference (the coalesced one) crashes the worker.
    cfg = make_config(make_model("m", max_batch=8, faults={"crash_on_infer": 2}), coalesce=True)
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        await host.load("m")
        gate.armed = lambda model, frame: isinstance(frame, Infer)
        async with anyio.create_task_group() as tg:
            held = Held(host, gate, tg)
            await held.queue(QUEUED)
            held.release()
        assert isinstance(held.results[0], synapse.EmbedResult)
        for index in range(1, len(QUEUED) + 1):
            assert isinstance(held.results[index], synapse.OutcomeUnknown), held.results[index]
        assert len(transport.frames("infer")) == 2  # nothing was sent again
        # The next generation serves later calls; exactly one restart.
        again = await host.embed("m", ["later"])
        assert again.vectors[0] == pytest.approx(expected("later"), abs=1e-6)
        assert host.snapshot().worker("m").restarts == 1


async def test_a_caller_that_gives_up_leaves_the_queue_and_sends_nothing(
    make_model: Any, make_config: Any, gate: Any
) -> None:
    async def body(held: Held, transport: InProcessFakeTransport) -> None:
        await held.queue(QUEUED[:1])
        scope = anyio.CancelScope()

        async def cancelled() -> None:
            with scope:
                await held.host.embed("m", ["gone"])

        held.tg.start_soon(cancelled)
        await eventually(lambda: held.host.backlog.waiting == 2)
        scope.cancel()
        await eventually(lambda: held.host.backlog.waiting == 1)
        # Past its deadline while queued: the same, through the deadline path.
        with pytest.raises(synapse.DeadlineExceeded):
            await held.host.embed("m", ["late"], deadline=synapse.Deadline(0.0))
        assert held.host.backlog.waiting == 1
        held.release()

    transport = await serve_held(make_model, make_config, gate, body)
    # "a" alone, then "b": neither "gone" nor "late" reached the worker.
    assert [frame["rows"] for frame in transport.frames("infer")] == [1, 1]


async def test_the_queue_is_bounded_by_max_waiting(
    make_model: Any, make_config: Any, gate: Any
) -> None:
    async def body(held: Held, transport: InProcessFakeTransport) -> None:
        await held.queue(QUEUED[:2])
        with pytest.raises(synapse.Overloaded, match="max_waiting = 2"):
            await held.host.embed("m", ["one too many"])
        held.release()

    await serve_held(make_model, make_config, gate, body, max_waiting=2)


async def test_closing_the_host_ends_queued_calls(
    make_model: Any, make_config: Any, gate: Any
) -> None:
    transport = InProcessFakeTransport()
    transport.reply_gate = gate
    cfg = make_config(make_model("m", max_batch=8), coalesce=True, exchange_timeout_s=1.0)
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        await host.load("m")
        gate.armed = lambda model, frame: isinstance(frame, Infer)
        async with anyio.create_task_group() as tg:
            held = Held(host, gate, tg)
            await held.queue(QUEUED[:2])
            tg.start_soon(host.aclose)
            await eventually(lambda: len(held.results) == 2)
            assert {type(r) for r in held.results.values()} == {synapse.Retired}
            assert {str(r) for r in held.results.values()} == {
                "the host closed before 'm' answered"
            }
            assert host.backlog.waiting == 0
            held.release()
    assert len(transport.frames("infer")) == 1


async def test_a_coalesced_call_whose_callers_all_gave_up_starts_nothing_new(
    make_model: Any, make_config: Any, gate: Any
) -> None:
    async def body(held: Held, transport: InProcessFakeTransport) -> None:
        held.call(0, ["a"])
        await gate.arrived.wait()
        scopes = [anyio.CancelScope(), anyio.CancelScope()]

        async def caller(scope: anyio.CancelScope, texts: list[str]) -> None:
            with scope:
                await held.host.embed("m", texts)

        # Two buckets between them: the coalesced call has two requests to send.
        held.tg.start_soon(caller, scopes[0], ["b", "long " * 10])
        held.tg.start_soon(caller, scopes[1], ["c"])
        await eventually(lambda: held.host.backlog.waiting == 2)
        second = type(gate)()  # a gate of its own for the shared request
        second.armed = lambda model, frame: isinstance(frame, Infer) and frame.shape.bucket == 8
        transport.reply_gate = second
        held.release()
        await second.arrived.wait()  # the shared bucket-8 request is at the worker
        for scope in scopes:
            scope.cancel()
        await eventually(lambda: held.host.backlog.waiting == 0)
        second.release.set()
        await eventually(lambda: held.host.snapshot().worker("m").inflight == 0)
        again = await held.host.embed("m", ["next"])
        assert again.vectors[0] == pytest.approx(expected("next"), abs=1e-6)

    transport = await serve_held(make_model, make_config, gate, body)
    # "a", then the shared bucket-8 request (drained), never the bucket-16 one.
    assert [frame["shape"][0] for frame in transport.frames("infer")] == [8, 8, 8]
    assert len(transport.launches) == 1


async def test_calls_queued_when_their_model_is_retired_are_not_started(
    make_model: Any, make_config: Any, gate: Any
) -> None:
    async def body(held: Held, transport: InProcessFakeTransport) -> None:
        await held.queue(QUEUED[:2])
        held.tg.start_soon(held.host.retire, "m")
        await eventually(lambda: held.host.snapshot().worker("m").state == "retiring")
        held.release()
        await eventually(lambda: len(held.results) == 3)
        assert isinstance(held.results[0], synapse.EmbedResult)  # drained, then answered
        assert {type(held.results[i]) for i in (1, 2)} == {synapse.Retired}

    transport = await serve_held(make_model, make_config, gate, body)
    assert len(transport.frames("infer")) == 1


async def test_coalesced_callers_out_of_lane_room_get_capacity_exhausted(
    make_model: Any, make_config: Any, gate: Any
) -> None:
    # "a" holds the lane's room while its reply is held; "b" coalesces. No
    # deadline passes before the test moves the clock (see room_waits): the
    # queued calls are queued by then, and their own waits go on.
    clock = synapse.FakeClock()
    transport = InProcessFakeTransport()
    transport.reply_gate = gate
    gate.armed = lambda model, frame: model == "a" and isinstance(frame, Infer)
    lanes = {"fake:0": {"capacity": 20}}
    cfg = make_config(make_model("a"), make_model("b"), lanes=lanes, coalesce=True)
    plugins = [transport_plugin(transport)]
    async with synapse.open_host(cfg, plugins=plugins, clock=clock) as host:
        await host.load("b")
        start = clock()
        results: dict[str, object] = {}

        async def b(text: str, seconds: float) -> None:
            try:
                await host.embed("b", [text], deadline=synapse.Deadline(start + seconds))
            except synapse.SynapseError as exc:
                results[text] = exc

        async with anyio.create_task_group() as tg:
            tg.start_soon(host.embed, "a", ["x"])
            await gate.arrived.wait()
            tg.start_soon(b, "runs first", 100)
            await eventually(lambda: host.backlog.waiting == 1)  # waiting for room
            tg.start_soon(b, "queued", 200)
            tg.start_soon(b, "queued too", 200)
            await eventually(lambda: host.backlog.waiting == 3)  # both queued behind it
            to_just_before(clock, start + 100, host, "b")
            await eventually(lambda: len(results) == 1)
            # The two queued calls now run as one, and wait for room in turn.
            to_just_before(clock, start + 200, host, "b")
            await eventually(lambda: len(results) == 3)
            gate.release.set()
        assert {text: type(r) for text, r in results.items()} == {
            "runs first": synapse.CapacityExhausted,
            "queued": synapse.CapacityExhausted,
            "queued too": synapse.CapacityExhausted,
        }
        assert all("had no room" in str(r) for r in results.values())


async def test_a_coalesced_callers_own_deadline_ends_in_what_the_shared_wait_noted() -> None:
    # A caller's own wait may end at its deadline before the coalesced call's
    # room wait does: it reports what that wait would end in, not a bare
    # DeadlineExceeded. The fake clock leaves the caller 1 ms of real wait.
    clock = synapse.FakeClock()
    runner = CallRunner(PluginHost([]), clock, anyio.CapacityLimiter(1), Backlog(), max_waiting=8)
    plan = Plan("m", "embed", (Item(0, "x", 1, 1, [1]),), BasicTokenizer())
    callers = [Call.new(plan, synapse.Deadline(clock() + 0.001), anyio.Event()) for _ in "ab"]
    shared = Coalesced.of(callers, anyio.Event())
    shared.note_expiry(synapse.CapacityExhausted("no room for the shared call"))
    for caller in callers:
        with pytest.raises(synapse.CapacityExhausted, match="no room for the shared call"):
            await runner.wait(caller)
        assert caller.abandoned
    shared.note_expiry(None)  # the wait ended otherwise: a bare deadline again
    with pytest.raises(synapse.DeadlineExceeded):
        await runner.wait(callers[0])


async def test_a_coalesced_call_refused_by_its_worker_is_served_call_by_call(
    make_model: Any, make_config: Any, gate: Any
) -> None:
    from synapse_core.testing.fake_worker import FakeOptions

    class SmallerWorker(FakeWorker):
        """Runs only bucket 8, though its catalog options declare 8, 16 and 32."""

        def load(self, options: FakeOptions) -> None:
            super().load(options)
            self.buckets = (8,)

    class SmallerTransport(InProcessFakeTransport):
        async def launch(self, request: LaunchRequest) -> Launched:
            return self.start_worker(request, SmallerWorker, 6_000_000)

    async def body(held: Held, transport: InProcessFakeTransport) -> None:
        # Ten words fit the declared buckets, not the worker's.
        await held.queue([["short"], ["fine", "word " * 10], ["also short"]])
        held.release()
        await eventually(lambda: len(held.results) == 4)
        results = held.results
        assert isinstance(results[1], synapse.EmbedResult)
        assert isinstance(results[3], synapse.EmbedResult)
        refused = results[2]
        assert isinstance(refused, synapse.Refused)
        assert (refused.code, refused.index) == ("over-ceiling", 1)  # its own index

    await serve_held(make_model, make_config, gate, body, SmallerTransport())


async def test_a_request_the_worker_rejects_fails_only_the_caller_whose_input_it_was(
    make_model: Any, make_config: Any, gate: Any, vocab_transport: Any
) -> None:
    async def body(held: Held, transport: InProcessFakeTransport) -> None:
        held.call(0, ["a"])
        await held.gate.arrived.wait()
        held.call(1, ["b"])
        held.call(2, [[VOCAB + 5]])  # type: ignore[list-item]
        held.call(3, ["c", "d"])
        await eventually(lambda: held.host.backlog.waiting == 3)
        held.release()
        await eventually(lambda: len(held.results) == 4)
        results = held.results
        assert isinstance(results[2], synapse.WorkerFault), results[2]
        for index, texts in ((1, ["b"]), (3, ["c", "d"])):
            assert isinstance(results[index], synapse.EmbedResult), results[index]
            assert results[index].vectors == [pytest.approx(expected(t), abs=1e-6) for t in texts]
        assert held.host.snapshot().worker("m").restarts == 0  # a rejection is not a fault

    await serve_held(make_model, make_config, gate, body, vocab_transport())


async def test_a_served_call_is_freed_at_once_not_left_to_the_cycle_collector(
    make_model: Any, make_config: Any, gate: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without cycles a call (texts, plan, rows) goes as its caller returns; in a
    # cycle it outlives it until a full collection, which under load is rare.
    import gc
    import weakref

    calls: list[weakref.ref[Call]] = []

    now = Starts.now

    def tracking(self: Starts, *args: Any, **kwargs: Any) -> Call:
        call = now(self, *args, **kwargs)
        calls.append(weakref.ref(call))
        return call

    monkeypatch.setattr(Starts, "now", tracking)

    async def body(held: Held, transport: InProcessFakeTransport) -> None:
        await held.queue(QUEUED)
        held.release()

    enabled = gc.isenabled()
    gc.disable()
    try:
        await serve_held(make_model, make_config, gate, body)
        assert len(calls) == len(QUEUED) + 1
        assert [ref() for ref in calls] == [None] * len(calls)
    finally:
        if enabled:
            gc.enable()


async def test_a_call_queued_and_started_alone_again_is_never_refused_as_overloaded(
    make_model: Any, make_config: Any, gate: Any, vocab_transport: Any
) -> None:
    # One permit, two waiting calls at most. "bad" and "good" share a request
    # the worker rejects; both start alone again while two more calls wait.
    async def body(held: Held, transport: InProcessFakeTransport) -> None:
        host = held.host
        held.call(0, ["a"])
        await held.gate.arrived.wait()
        held.call(1, [[VOCAB + 5]])  # type: ignore[list-item]
        held.call(2, ["good"])
        await eventually(lambda: host.backlog.waiting == 2)
        second = type(gate)()  # holds the shared request's reply
        second.armed = lambda model, frame: (
            isinstance(frame, Infer) and frame.sequences[0][0] >= VOCAB
        )
        transport.reply_gate = second
        held.release()
        await second.arrived.wait()
        held.call(3, ["x"])
        held.call(4, ["y"])
        await eventually(lambda: host.backlog.waiting == 2)
        second.release.set()
        await eventually(lambda: len(held.results) == 5)
        results = held.results
        assert isinstance(results[1], synapse.WorkerFault), results[1]
        for index in (0, 2, 3, 4):
            assert isinstance(results[index], synapse.EmbedResult), (index, results[index])

    await serve_held(
        make_model, make_config, gate, body, vocab_transport(), max_concurrent=1, max_waiting=2
    )
