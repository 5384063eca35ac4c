"""A model served by several workers (``workers = N``): which worker a call goes to.

Every reply is held until the test lets it go (``HeldReplies``), and every
task is blocked before the test looks, so which worker a request reached is
decided by the host alone, never by timing.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

import synapse_core as synapse
from synapse_core.residency.worker import Phase
from synapse_core.testing import transport_plugin
from synapse_core.testing.fake import HeldReplies, InProcessFakeTransport
from synapse_core.tokenizer import BasicTokenizer
from synapse_core.transport import Launched, LaunchRequest

from .test_fairness import LONG, budget_model, started, vector

pytestmark = pytest.mark.anyio


def _ids(text: str) -> list[list[int]]:
    return [BasicTokenizer().encode(text)]


def _serving(
    make_model: Any, make_config: Any, workers: int
) -> tuple[Any, HeldReplies, InProcessFakeTransport]:
    held = HeldReplies()
    transport = InProcessFakeTransport()
    transport.reply_gate = held
    cfg = make_config(budget_model(make_model, workers=workers))
    return cfg, held, transport


@pytest.mark.parametrize("workers", [1, 2])
async def test_a_short_call_goes_to_an_idle_worker_not_behind_the_bulk_request(
    make_model: Any, make_config: Any, workers: int
) -> None:
    cfg, held, transport = _serving(make_model, make_config, workers)
    results: dict[str, Any] = {}
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        await host.load("m")
        await host.embed("m", [LONG[0], "warm"])  # both shapes: only inferences follow
        held.armed = True
        async with anyio.create_task_group() as tg:
            await started(tg, results, "bulk", lambda: host.embed("m", LONG))
            await held.wait_for(1)
            await started(tg, results, "short", lambda: host.embed("m", ["short"]))
            # With a second worker the short call's request is under way while
            # the bulk call's first is still unanswered; with one it waits.
            sent = [f.sequences for f in held.received]
            if workers == 2:
                assert sent == [_ids(LONG[0]), _ids("short")]
                assert [w.inflight for w in host.workers("m")] == [1, 1]
            else:
                assert sent == [_ids(LONG[0])]
            await held.answer_all()
    assert results["bulk"].vectors == [pytest.approx(vector(t), abs=1e-6) for t in LONG]
    assert results["short"].vectors == [pytest.approx(vector("short"), abs=1e-6)]
    assert results["short"].identity == results["bulk"].identity


async def test_a_call_waits_on_the_worker_without_a_bulk_call(
    make_model: Any, make_config: Any
) -> None:
    """With every worker busy, a call goes to one that holds no bulk call:
    the bulk call is on the first worker, so slot order alone would send
    the next call behind it."""
    cfg, held, transport = _serving(make_model, make_config, 2)
    results: dict[str, Any] = {}
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        await host.load("m")
        held.armed = True
        async with anyio.create_task_group() as tg:
            await started(tg, results, "bulk", lambda: host.embed("m", LONG))
            await started(tg, results, "short", lambda: host.embed("m", ["short"]))
            await started(tg, results, "next", lambda: host.embed("m", ["next"]))
            first, second = host.workers("m")
            assert (first.inflight, first.small_inflight) == (1, 0)  # the bulk call
            assert (second.inflight, second.small_inflight) == (2, 2)  # both shorts
            await held.answer_all()
    assert results["next"].vectors == [pytest.approx(vector("next"), abs=1e-6)]


@contextlib.asynccontextmanager
async def _beside_a_bulk_call(
    make_model: Any,
    make_config: Any,
    transport: InProcessFakeTransport | None = None,
    short: bool = False,
) -> AsyncIterator[tuple[Any, Any, HeldReplies, dict[str, Any]]]:
    """A host of a two-worker model, nothing loaded, and a task group in
    which a bulk call has started the first worker and sent its first
    request (held), and then, with ``short``, a short call has started:
    yields the host, the group, the held replies and the results by name
    ("bulk" and "short")."""
    held = HeldReplies()
    transport = transport or InProcessFakeTransport()
    transport.reply_gate = held
    cfg = make_config(budget_model(make_model, workers=2))
    results: dict[str, Any] = {}
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        held.armed = True
        async with anyio.create_task_group() as tg:
            await started(tg, results, "bulk", lambda: host.embed("m", LONG))
            await held.wait_for(1)
            if short:
                await started(tg, results, "short", lambda: host.embed("m", ["short"]))
            yield host, tg, held, results
    assert results["bulk"].vectors == [pytest.approx(vector(t), abs=1e-6) for t in LONG]


async def test_a_short_call_beside_the_first_bulk_call_does_not_wait_for_a_new_worker(
    make_model: Any, make_config: Any
) -> None:
    """The bulk call started the first worker. A short call then goes
    behind the bulk call's request on it, not to a worker that has yet to
    start (about a second on a real model); the empty slot starts
    meanwhile, and the next short call runs there."""
    async with _beside_a_bulk_call(make_model, make_config, short=True) as (
        host,
        tg,
        held,
        results,
    ):
        first, second = host.workers("m")
        assert (first.inflight, first.small_inflight) == (2, 1)
        assert second.phase is Phase.READY and second.inflight == 0  # started beside it
        await started(tg, results, "next", lambda: host.embed("m", ["next"]))
        assert second.inflight == 1
        assert [f.sequences for f in held.received] == [_ids(LONG[0]), _ids("next")]
        await held.answer_all()
    assert results["short"].vectors == [pytest.approx(vector("short"), abs=1e-6)]
    assert results["next"].vectors == [pytest.approx(vector("next"), abs=1e-6)]


async def test_a_second_bulk_call_starts_a_worker_of_its_own(
    make_model: Any, make_config: Any
) -> None:
    async with _beside_a_bulk_call(make_model, make_config) as (host, tg, held, results):
        await started(tg, results, "other", lambda: host.embed("m", LONG[::-1]))
        await held.wait_for(2)
        assert [w.inflight for w in host.workers("m")] == [1, 1]
        await held.answer_all()
    assert results["other"].vectors == [pytest.approx(vector(t), abs=1e-6) for t in LONG[::-1]]


class SecondLaunchWaits(InProcessFakeTransport):
    """Holds the second worker's launch until ``go`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.go = anyio.Event()
        self.attempts = 0

    async def launch(self, request: LaunchRequest) -> Launched:
        self.attempts += 1
        if self.attempts == 2:
            await self.go.wait()
        return await super().launch(request)


async def test_a_bulk_call_waits_for_a_starting_worker_not_behind_a_busy_one(
    make_model: Any, make_config: Any
) -> None:
    transport = SecondLaunchWaits()
    async with _beside_a_bulk_call(make_model, make_config, transport, short=True) as beside:
        host, tg, held, results = beside
        first, second = host.workers("m")
        assert second.phase is Phase.STARTING and second.inflight == 0
        await started(tg, results, "other", lambda: host.embed("m", LONG[::-1]))
        assert (first.inflight, second.inflight) == (2, 1)  # the bulk call waits for it
        transport.go.set()
        await held.wait_for(2)
        assert held.received[-1].sequences == _ids(LONG[-1])  # its first request, there
        held.armed = False
        await held.answer_all()
    assert results["other"].vectors == [pytest.approx(vector(t), abs=1e-6) for t in LONG[::-1]]


async def test_a_failed_start_beside_a_short_call_leaves_the_call_served(
    make_model: Any, make_config: Any
) -> None:
    transport = SecondLaunchFails()
    async with _beside_a_bulk_call(make_model, make_config, transport, short=True) as beside:
        host, _, held, results = beside
        held.armed = False  # the failed start's cleanup may outlast the answers
        await held.answer_all()
        assert [w.phase for w in host.workers("m")] == [Phase.READY, Phase.FAILED]
        assert "no room for a second worker" in host.workers("m")[1].reason
        after = await host.embed("m", ["after"])
        assert after.vectors == [pytest.approx(vector("after"), abs=1e-6)]
    assert results["short"].vectors == [pytest.approx(vector("short"), abs=1e-6)]


async def test_workers_start_lazily_load_starts_all_and_retire_refunds_all(
    make_model: Any, make_config: Any
) -> None:
    cfg, _, transport = _serving(make_model, make_config, 3)
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        await host.embed("m", ["one"])
        assert len(host.workers("m")) == 1  # one call needs one worker
        await host.load("m")
        workers = host.workers("m")
        assert [w.phase for w in workers] == [Phase.READY] * 3
        assert len({w.worker_id for w in workers}) == 3
        assert len(host.snapshot().lanes["fake:0"].workers) == 3
        await host.retire("m")
        assert [w.phase for w in workers] == [Phase.EXITED] * 3
        assert host.snapshot().lanes["fake:0"].reserved == 0  # every reservation refunded
        with pytest.raises(synapse.Retired):
            await host.embed("m", ["after"])
        await host.load("m")  # a load serves it again, on new workers
        assert len(host.workers("m")) == 3
        assert not {w.worker_id for w in host.workers("m")} & {w.worker_id for w in workers}


class SecondLaunchFails(InProcessFakeTransport):
    attempts = 0

    async def launch(self, request: LaunchRequest) -> Launched:
        self.attempts += 1
        if self.attempts == 2:
            raise OSError("no room for a second worker")
        return await super().launch(request)


async def test_a_failed_start_of_one_worker_fails_the_load_and_the_other_serves(
    make_model: Any, make_config: Any
) -> None:
    transport = SecondLaunchFails()
    cfg = make_config(budget_model(make_model, workers=2))
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        with pytest.raises(synapse.SynapseError, match="no room for a second worker"):
            await host.load("m")
        # which of the two launched second depends on the backend's task order
        assert sorted(w.phase for w in host.workers("m")) == [Phase.FAILED, Phase.READY]
        assert (await host.embed("m", ["still"])).vectors == [
            pytest.approx(vector("still"), abs=1e-6)
        ]


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_workers_is_checked_in_the_catalog(bad: object) -> None:
    entry = {"name": "a", "task": "embed", "transport": "fake", "package": "p", "ceiling": 32}
    with pytest.raises(synapse.ConfigError, match=r"models\[0\]\.workers"):
        synapse.HostConfig.from_dict({"models": [{**entry, "workers": bad}]})
    assert synapse.HostConfig.from_dict({"models": [entry]}).models[0].workers == 1
