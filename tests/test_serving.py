"""The serving path: refusals, buckets, order, cancellation, deadlines, backpressure."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

import synapse_core as synapse
from synapse_core.testing import eventually, transport_plugin
from synapse_core.testing.fake import InProcessFakeTransport
from synapse_core.testing.fake_worker import fake_vector
from synapse_core.tokenizer import BasicTokenizer
from synapse_core.transport import Availability, Launched, LaunchRequest, Transport
from synapse_core.wire import Infer

pytestmark = pytest.mark.anyio

GOLDEN = Path(__file__).parent / "golden" / "refusals.json"


def expected_vector(text: str, dims: int = 4) -> list[float]:
    return fake_vector(BasicTokenizer().encode(text), dims)


async def test_rows_come_back_in_input_order_across_buckets(
    make_model: Any, make_config: Any
) -> None:
    transport = InProcessFakeTransport()
    cfg = make_config(make_model("m", dims=16))
    texts = ["w " * n for n in (20, 1, 9, 3, 25, 5, 1, 14)]
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        result = await host.embed("m", texts)
    assert len(result.vectors) == len(texts)
    for text, vector in zip(texts, result.vectors, strict=True):
        assert vector == pytest.approx(expected_vector(text, 16), abs=1e-6)
    # Smallest fitting bucket per text (length = words + 2), smallest group first.
    shapes = [tuple(f["shape"]) for f in transport.frames("infer")]
    assert [s[0] for s in shapes] == sorted(s[0] for s in shapes)
    assert {s[0] for s in shapes} == {8, 16, 32}
    assert result.identity == "fake:pkg-m:d16"


async def test_rerank_scores_in_document_order(make_model: Any, make_config: Any) -> None:
    transport = InProcessFakeTransport()
    cfg = make_config(make_model("r", task="rerank", dims=32))
    docs = ["alpha beta", "gamma " * 12, "alpha"]
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        result = await host.rerank("r", query="alpha", documents=docs)
    q = expected_vector("alpha", 32)
    expected = [sum(a * b for a, b in zip(q, expected_vector(d, 32), strict=True)) for d in docs]
    assert result.scores == pytest.approx(expected, abs=1e-5)


async def test_group_larger_than_max_batch_is_split_within_one_lease(
    make_model: Any, make_config: Any
) -> None:
    transport = InProcessFakeTransport()
    cfg = make_config(make_model("m", max_batch=2))
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        result = await host.embed("m", [f"t{i}" for i in range(5)])
    assert len(result.vectors) == 5
    infers = transport.frames("infer")
    assert len(infers) == 3 and len(transport.frames("admit")) == 1


async def test_catalog_semantic_refusals_match_golden_and_never_fetch(
    make_model: Any, make_config: Any
) -> None:
    class Unavailable(Transport):
        name = "far-away"

        def availability(self) -> Availability:
            return Availability.no("needs hardware this machine does not have")

    transport = InProcessFakeTransport()
    far = make_model("far")
    far["transport"] = "far-away"
    ghost = make_model("ghost")
    ghost["transport"] = "not-installed"
    cfg = make_config(
        make_model("m", ceiling=10), make_model("r", task="rerank", ceiling=10), far, ghost
    )
    cases: list[tuple[str, Any]] = [
        ("unknown model", lambda h: h.embed("nope", ["x"])),
        ("wrong task", lambda h: h.embed("r", ["x"])),
        ("rerank on embed model", lambda h: h.rerank("m", query="q", documents=["d"])),
        ("transport unavailable", lambda h: h.embed("far", ["x"])),
        ("transport not installed", lambda h: h.embed("ghost", ["x"])),
        ("empty input", lambda h: h.embed("m", [])),
        ("empty documents", lambda h: h.rerank("r", query="q", documents=[])),
        ("empty sequence", lambda h: h.embed("m", ["fine", "  ", "fine"])),
        ("empty query", lambda h: h.rerank("r", query=" ", documents=["d"])),
        ("over ceiling", lambda h: h.embed("m", ["ok", "a b c d e f g h i"])),
        (
            "rerank pair over ceiling",
            lambda h: h.rerank("r", query="a b c", documents=["x", "d e f g h"]),
        ),
    ]
    got = []
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport, Unavailable())]) as host:
        for name, call in cases:
            with pytest.raises(synapse.Refused) as info:
                await call(host)
            err = info.value
            got.append(
                {
                    "case": name,
                    "code": err.code,
                    "index": err.index,
                    "model": err.model,
                    "message": str(err),
                }
            )
        # Refusals happen before anything is spawned or fetched.
        assert transport.launches == []
        assert host.snapshot().lanes == {}
    if os.environ.get("SYNAPSE_UPDATE_GOLDEN"):
        GOLDEN.write_text(json.dumps(got, indent=2) + "\n")
    assert got == json.loads(GOLDEN.read_text())


async def test_packed_cancelled_mixed_call_drains_with_one_lease_at_a_time(
    make_model: Any, make_config: Any, gate: Any
) -> None:
    transport = InProcessFakeTransport()
    transport.reply_gate = gate
    host_box: list[synapse.Host] = []
    leases_seen: list[int] = []

    def armed(model: str, frame: Any) -> bool:
        # Every frame the worker answers is a moment to count this call's leases.
        leases_seen.append(host_box[0].snapshot().worker("m").leases)
        return isinstance(frame, Infer) and frame.shape.bucket == 16

    gate.armed = armed
    cfg = make_config(make_model("m", max_batch=2))
    # Three buckets, interleaved: 8 (1 word), 16 (10 words), 32 (20 words).
    texts = ["a", "b " * 10, "c " * 20, "d", "e " * 10, "f " * 20, "g"]
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        host_box.append(host)
        with anyio.CancelScope() as caller:

            async def cancel_at_gate() -> None:
                await gate.arrived.wait()
                caller.cancel()

            async with anyio.create_task_group() as tg:
                tg.start_soon(cancel_at_gate)
                await host.embed("m", texts)
        assert caller.cancelled_caught
        worker = host.snapshot().worker("m")
        assert worker.inflight == 1 and worker.leases == 1  # the task still owns its lease
        gate.release.set()
        await eventually(lambda: host.snapshot().worker("m").inflight == 0)
        worker = host.snapshot().worker("m")
        assert (worker.leases, worker.generation, worker.state) == (0, 1, "ready")
        # The 8-bucket group ran (two chunks), the 16-bucket group's first chunk
        # was drained, and the 32-bucket group never started.
        buckets = [f["shape"][0] for f in transport.frames("infer") + transport.frames("admit")]
        assert 32 not in buckets
        assert [f["shape"][0] for f in transport.frames("infer")] == [8, 8, 16]
        assert max(leases_seen) == 1
        # The drained worker serves the next call without a restart.
        again = await host.embed("m", ["h"])
        assert again.vectors[0] == pytest.approx(expected_vector("h"), abs=1e-6)
        assert host.snapshot().worker("m").generation == 1


async def test_serving_caller_cancellation_drains_reply_without_restart(
    make_model: Any, make_config: Any, gate: Any
) -> None:
    transport = InProcessFakeTransport()
    transport.reply_gate = gate
    cfg = make_config(make_model("m"))
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        await host.embed("m", ["warm up"])
        gate.armed = lambda model, frame: isinstance(frame, Infer)
        with anyio.move_on_after(30) as caller:
            async with anyio.create_task_group() as tg:

                async def cancel_at_gate() -> None:
                    await gate.arrived.wait()
                    caller.cancel()

                tg.start_soon(cancel_at_gate)
                await host.embed("m", ["cancelled"])
        assert caller.cancelled_caught
        assert host.snapshot().worker("m").inflight == 1  # reply not drained yet
        gate.armed = lambda model, frame: False
        gate.release.set()
        await eventually(lambda: host.snapshot().worker("m").inflight == 0)
        # The next exchange gets its own reply: the drained one did not leak into it.
        result = await host.embed("m", ["next"])
        assert result.vectors[0] == pytest.approx(expected_vector("next"), abs=1e-6)
        worker = host.snapshot().worker("m")
        assert (worker.generation, worker.state, worker.restarts) == (1, "ready", 0)
        assert len(transport.launched("m")) == 1


async def test_deadline_expired_before_a_group_starts_sends_nothing(
    make_model: Any, make_config: Any
) -> None:
    clock = synapse.FakeClock()
    transport = InProcessFakeTransport()
    cfg = make_config(make_model("m"))
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)], clock=clock) as host:
        await host.load("m")
        with pytest.raises(synapse.DeadlineExceeded):
            await host.embed("m", ["x"], deadline=synapse.Deadline(clock() - 1))
        assert transport.frames("admit") == [] and transport.frames("infer") == []


async def test_overloaded_beyond_max_waiting(make_model: Any, make_config: Any, gate: Any) -> None:
    transport = InProcessFakeTransport()
    transport.reply_gate = gate
    gate.armed = lambda model, frame: isinstance(frame, Infer)
    cfg = make_config(make_model("m"), max_concurrent=1, max_waiting=1)
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        async with anyio.create_task_group() as tg:
            tg.start_soon(host.embed, "m", ["holds the permit"])
            await gate.arrived.wait()
            tg.start_soon(host.embed, "m", ["waits for it"])
            await eventually(lambda: host.backlog.waiting == 1)
            with pytest.raises(synapse.Overloaded, match="max_waiting = 1"):
                await host.embed("m", ["one too many"])
            gate.armed = lambda model, frame: False
            gate.release.set()
        assert host.snapshot().worker("m").inflight == 0


async def test_retired_model_refuses_until_loaded_again(make_model: Any, make_config: Any) -> None:
    transport = InProcessFakeTransport()
    cfg = make_config(make_model("m"))
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        await host.embed("m", ["x"])
        await host.retire("m")
        with pytest.raises(synapse.Retired, match="load it again"):
            await host.embed("m", ["x"])
        await host.load("m")
        assert (await host.embed("m", ["x"])).vectors
        assert len(transport.launches) == 2


async def test_leaving_the_host_retires_every_worker(make_model: Any, make_config: Any) -> None:
    transport = InProcessFakeTransport()
    cfg = make_config(make_model("a"), make_model("b"))
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        await host.embed("a", ["x"])
        await host.load("b")
    snap = host.snapshot()
    assert {w.state for w in snap.lanes["fake:0"].workers} == {"exited"}
    assert snap.lanes["fake:0"].reserved == 0
    assert all(r.process.exited for r in transport.launches)
    assert len(transport.frames("shutdown")) == 2


async def test_opening_a_host_spawns_nothing(make_model: Any, make_config: Any) -> None:
    transport = InProcessFakeTransport()
    async with synapse.open_host(
        make_config(make_model("a")), plugins=[transport_plugin(transport)]
    ) as host:
        assert host.snapshot().lanes == {}
        assert transport.launches == []


async def test_snapshot_is_plain_and_serialisable(make_model: Any, make_config: Any) -> None:
    transport = InProcessFakeTransport()
    cfg = make_config(make_model("m"))
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        await host.embed("m", ["x"])
        doc = json.loads(host.snapshot().to_json())
    lane = doc["lanes"]["fake:0"]
    assert (lane["capacity"], lane["reserved"]) == (1_000_000, 16)
    (worker,) = lane["workers"]
    assert worker["model"] == "m" and worker["state"] == "ready" and worker["generation"] == 1
    assert worker["shapes"] == [{"bucket": 8, "batch": 2, "units": 16}]
    assert (worker["leases"], worker["inflight"]) == (0, 0)
    assert doc["admissions"] == 1


class LargestBucket:
    """A plugin that overrides the smallest-fit default."""

    @synapse.hookimpl
    def synapse_select_bucket(self, length: int, buckets: list[int], model: Any) -> int:
        return buckets[-1]


async def test_a_bucket_hook_plugin_overrides_the_default(
    make_model: Any, make_config: Any
) -> None:
    transport = InProcessFakeTransport()
    cfg = make_config(make_model("m"))
    plugins = [transport_plugin(transport), LargestBucket()]
    async with synapse.open_host(cfg, plugins=plugins) as host:
        for _ in range(2):  # a cold call, then a warm one begun by the caller
            result = await host.embed("m", ["short"])
            assert result.vectors[0] == pytest.approx(expected_vector("short"), abs=1e-6)
    assert [f["shape"] for f in transport.frames("infer")] == [[32, 2], [32, 2]]


async def test_a_bucket_hook_plugin_registered_later_is_honoured(
    make_model: Any, make_config: Any
) -> None:
    transport = InProcessFakeTransport()
    cfg = make_config(make_model("m"))
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        await host.embed("m", ["short"])  # the default...
        host.plugins.add(LargestBucket())
        await host.embed("m", ["short"])  # ...until a plugin brings its own
    assert [f["shape"] for f in transport.frames("infer")] == [[8, 2], [32, 2]]


class ShrinkingBuckets(InProcessFakeTransport):
    """Its replacement workers report fewer buckets than the first one."""

    async def launch(self, request: LaunchRequest) -> Launched:
        if request.generation > 1:
            options = {**request.model.options, "buckets": [16, 32]}
            request = attrs.evolve(request, model=attrs.evolve(request.model, options=options))
        return await super().launch(request)


async def test_a_replacement_worker_s_buckets_are_the_ones_chosen_from(
    make_model: Any, make_config: Any
) -> None:
    transport = ShrinkingBuckets()
    cfg = make_config(make_model("m", faults={"crash_on_infer": 2, "only_generation": 1}))
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        await host.embed("m", ["short"])
        with pytest.raises(synapse.OutcomeUnknown):
            await host.embed("m", ["short"])  # generation 1 crashes; 2 replaces it
        await host.embed("m", ["short"])
    assert [f["shape"] for f in transport.frames("infer")] == [[8, 2], [8, 2], [16, 2]]


class CountingBuckets:
    """Synapse's own choice (the smallest bucket that fits), recording each
    length it is asked about."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    @synapse.hookimpl
    def synapse_select_bucket(self, length: int, buckets: list[int], model: Any) -> int:
        self.asked.append(length)
        return next(bucket for bucket in buckets if bucket >= length)


async def test_a_call_asks_the_bucket_hook_once_per_distinct_length(
    make_model: Any, make_config: Any
) -> None:
    transport = InProcessFakeTransport()
    counting = CountingBuckets()
    cfg = make_config(make_model("m", max_batch=8))
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport), counting]) as host:
        await host.load("m")
        counting.asked.clear()
        # Three distinct lengths among six texts: 1 word, 10 words, 20 words.
        await host.embed("m", ["a", "b", "c " * 10, "d", "e " * 10, "f " * 20])
        assert len(counting.asked) == len(set(counting.asked)) == 3
        await host.embed("m", ["g"])  # each call asks again
        assert counting.asked[3] == counting.asked[0]
    assert [f["shape"][0] for f in transport.frames("infer")] == [8, 16, 32, 8]


class MiscountingTransport(InProcessFakeTransport):
    """Its tokenizer counts one token too many in texts that say "miscount"."""

    def tokenizer(self, model: Any) -> Any:
        class Miscounting(BasicTokenizer):
            def count(self, text: str) -> int:
                return super().count(text) + ("miscount" in text)

        return Miscounting()


async def test_a_tokenizer_whose_count_and_encode_disagree_is_a_plugin_error(
    make_model: Any, make_config: Any
) -> None:
    transport = MiscountingTransport()
    cfg = make_config(make_model("m"))
    # More texts than are encoded while planning: these are counted first.
    texts = [f"text {i}" for i in range(12)]
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        with pytest.raises(synapse.PluginError, match=r"input 11 .*count\(\) and encode\(\)"):
            await host.embed("m", [*texts[:11], "miscount here"])
        result = await host.embed("m", texts)  # the host keeps serving
        assert result.vectors[11] == pytest.approx(expected_vector(texts[11]), abs=1e-6)
        worker = host.snapshot().worker("m")
        assert (worker.generation, worker.restarts, worker.inflight) == (1, 0, 0)
        assert host.snapshot().lanes["fake:0"].reserved > 0  # shapes stay admitted


@pytest.mark.parametrize("count", [1, 40])
async def test_large_and_small_calls_return_the_same_rows(
    make_model: Any, make_config: Any, count: int
) -> None:
    """Small calls are encoded while planned, large ones chunk by chunk."""
    texts = [" ".join(f"w{i}x{j}" for j in range(i % 7 + 1)) for i in range(count)]
    cfg = make_config(make_model("m"))
    async with synapse.open_host(cfg, plugins=[transport_plugin(InProcessFakeTransport())]) as host:
        result = await host.embed("m", texts)
    assert result.vectors == [pytest.approx(expected_vector(t), abs=1e-6) for t in texts]


@pytest.mark.parametrize("gives_up", ["cancelled", "deadline"])
async def test_a_call_waiting_for_a_busy_channel_sends_nothing_once_its_caller_gave_up(
    make_model: Any, make_config: Any, gate: Any, gives_up: str
) -> None:
    clock = synapse.FakeClock()
    transport = InProcessFakeTransport()
    transport.reply_gate = gate
    cfg = make_config(make_model("m"))
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)], clock=clock) as host:
        await host.embed("m", ["warm up"])
        gate.armed = lambda model, frame: isinstance(frame, Infer)
        async with anyio.create_task_group() as tg:
            tg.start_soon(host.embed, "m", ["holds the channel"])
            await gate.arrived.wait()
            outcome: list[object] = []
            waiter = anyio.CancelScope()

            async def second() -> None:
                with waiter:
                    try:
                        await host.embed(
                            "m", ["waits for the channel"], deadline=synapse.Deadline(clock() + 5)
                        )
                    except synapse.SynapseError as exc:
                        outcome.append(exc)

            tg.start_soon(second)
            await anyio.wait_all_tasks_blocked()
            if gives_up == "cancelled":
                waiter.cancel()
            else:
                clock.advance(10)
            gate.armed = lambda model, frame: False
            gate.release.set()
        await eventually(lambda: host.snapshot().worker("m").inflight == 0)
        sent = [f["request_id"] for f in transport.frames("infer")]
        assert len(sent) == 2  # the warm-up and the call that held the channel
        if gives_up == "deadline":
            assert len(outcome) == 1 and isinstance(outcome[0], synapse.DeadlineExceeded)
            assert "nothing was sent" in str(outcome[0])
        worker = host.snapshot().worker("m")
        assert (worker.generation, worker.restarts) == (1, 0)


class EncodeOnlyTransport(InProcessFakeTransport):
    """A tokenizer with only the required methods (no count or positions)."""

    def tokenizer(self, model: Any) -> Any:
        basic = BasicTokenizer()

        class EncodeOnly:
            def encode(self, text: str) -> list[int]:
                return basic.encode(text)

            def sequence_length(self, ids: list[int], pair: list[int] | None = None) -> int:
                return basic.sequence_length(ids, pair)

        return EncodeOnly()


class BrokenTokenizerTransport(InProcessFakeTransport):
    """A tokenizer that raises on texts that say "boom": when it encodes them,
    and with ``when_counting`` also when it counts them."""

    def __init__(self, when_counting: bool = False) -> None:
        super().__init__()
        self.when_counting = when_counting

    def tokenizer(self, model: Any) -> Any:
        when_counting = self.when_counting

        def check(text: str) -> None:
            if "boom" in text:
                raise ValueError("cannot tokenize this")

        class Broken(BasicTokenizer):
            def encode(self, text: str) -> list[int]:
                check(text)
                return super().encode(text)

            def count(self, text: str) -> int:
                if when_counting:
                    check(text)
                return super().count(text)

        return Broken()


@pytest.mark.parametrize("count", [2, 12])  # encoded up front; counted
@pytest.mark.parametrize("first", ["", "word " * 250])  # empty; over the ceiling
async def test_the_first_bad_input_is_reported_whatever_is_wrong_with_later_ones(
    make_model: Any, make_config: Any, count: int, first: str
) -> None:
    texts = [first] + ["fine"] * (count - 2) + ["boom"]
    cfg = make_config(make_model("m"))
    plugins = [transport_plugin(BrokenTokenizerTransport(when_counting=True))]
    async with synapse.open_host(cfg, plugins=plugins) as host:
        with pytest.raises(synapse.Refused) as refused:
            await host.embed("m", texts)
    assert refused.value.index == 0


@pytest.mark.parametrize("count", [1, 12])
async def test_a_tokenizer_without_count_is_encoded_up_front(
    make_model: Any, make_config: Any, count: int
) -> None:
    texts = [f"text number {i}" for i in range(count)]
    cfg = make_config(make_model("m"))
    async with synapse.open_host(cfg, plugins=[transport_plugin(EncodeOnlyTransport())]) as host:
        result = await host.embed("m", texts)
    assert result.vectors == [pytest.approx(expected_vector(t), abs=1e-6) for t in texts]


@pytest.mark.parametrize("count", [1, 12])
async def test_a_tokenizer_that_raises_is_a_plugin_error_and_the_host_keeps_serving(
    make_model: Any, make_config: Any, count: int
) -> None:
    texts = [f"fine {i}" for i in range(count - 1)] + ["boom"]
    cfg = make_config(make_model("m"))
    plugins = [transport_plugin(BrokenTokenizerTransport())]
    async with synapse.open_host(cfg, plugins=plugins) as host:
        with pytest.raises(synapse.PluginError, match=rf"model 'm' failed on input {count - 1}"):
            await host.embed("m", texts)
        assert (await host.embed("m", ["fine"])).vectors


async def test_a_tokenizer_failing_in_the_head_start_raises_before_any_await(
    make_model: Any, make_config: Any
) -> None:
    """On a warm worker a counted call's first request is encoded in the
    caller's head start: its tokenizer error is raised at once, having let go
    of everything, even in a cancelled scope."""
    texts = ["boom"] + [f"fine {i}" for i in range(11)]
    cfg = make_config(make_model("m"))
    plugins = [transport_plugin(BrokenTokenizerTransport())]
    async with synapse.open_host(cfg, plugins=plugins) as host:
        await host.embed("m", ["warm up"])
        raised: Exception | None = None
        with anyio.CancelScope() as scope:
            scope.cancel()  # a cancellation would be absorbed here, not reported
            try:
                await host.embed("m", texts)
            except synapse.PluginError as exc:
                raised = exc
        assert raised is not None and "failed on input 0" in str(raised)
        snapshot = host.snapshot().worker("m")
        assert (snapshot.leases, snapshot.inflight) == (0, 0)
        assert (await host.embed("m", ["fine"])).vectors


async def test_a_head_start_whose_records_fail_lets_go_of_the_permit_and_the_request(
    make_model: Any, make_config: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The request is written but its lease cannot be recorded: the permit
    goes back, the unread reply's generation is recovered, and the caller
    gets an internal error; the next call is served."""
    from synapse_core.residency.supervisor import Supervisor

    cfg = make_config(make_model("m"))
    async with synapse.open_host(cfg, plugins=[transport_plugin(InProcessFakeTransport())]) as host:
        await host.embed("m", ["warm up"])

        def broken(self: Supervisor, worker: Any, shape: Any) -> Any:
            raise RuntimeError("records failed")

        with monkeypatch.context() as patch:
            patch.setattr(Supervisor, "lease_begun", broken)
            with pytest.raises(synapse.InternalError, match="records failed"):
                await host.embed("m", ["lost"])
        assert host._runner.permits.borrowed_tokens == 0
        assert (await host.embed("m", ["fine"])).vectors
        worker = host.snapshot().worker("m")
        assert (worker.generation, worker.inflight, worker.leases) == (2, 0, 0)
