"""Fair sharing of a worker among calls: the ordering rule, step by step.

A call's work is cut into requests of at most ``max_batch_tokens`` positions,
and between two requests of a call the worker goes to the call that has
waited longest. Every reply is held here until the test lets it go, and
each call is known to be waiting (every task blocked) before the next reply
is released, so the order the worker sees requests in is decided by the
host alone, never by timing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import attrs
import pytest

import synapse_core as synapse
from synapse_core.cut import JOINED_BUDGETS
from synapse_core.testing import transport_plugin
from synapse_core.testing.fake import HeldReplies, InProcessFakeTransport
from synapse_core.testing.fake_worker import fake_vector
from synapse_core.tokenizer import BasicTokenizer
from synapse_core.wire import Infer

pytestmark = pytest.mark.anyio

#: 22 positions with [CLS] and [SEP]: bucket 32, one text per request at a budget of 32
LONG = [f"long{i} " * 20 for i in range(4)]


def vector(text: str) -> list[float]:
    return fake_vector(BasicTokenizer().encode(text), 4)


def budget_model(make_model: Any, **extra: Any) -> dict[str, Any]:
    """A fake model with batches of 8 and a budget of 32 positions: one
    bucket-32 text, or four bucket-8 texts, per request."""
    return {**make_model("m", max_batch=8), "max_batch_tokens": 32, **extra}


async def started(tg: Any, results: dict[str, Any], name: str, call: Any) -> None:
    """Start ``call`` in ``tg`` (its result kept under ``name``) and let it run
    until it waits."""

    async def run() -> None:
        results[name] = await call()

    tg.start_soon(run)
    await anyio.wait_all_tasks_blocked()


async def bulk_then_shorts(
    cfg: synapse.HostConfig,
    shorts: list[str],
    after: Callable[[dict[str, Any]], None] = lambda results: None,
) -> tuple[HeldReplies, dict[str, Any]]:
    """Serve the bulk call of :data:`LONG` and, once its first request is with
    the worker, each of ``shorts`` as a call of its own; answer every request
    in turn (``after`` sees the results after each answer). Returns the
    requests the worker received and each call's result, by name."""
    held = HeldReplies()
    transport = InProcessFakeTransport()
    transport.reply_gate = held
    results: dict[str, Any] = {}
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        await host.embed("m", [LONG[0], "warm"])  # both shapes admitted: only inferences follow
        held.armed = True
        async with anyio.create_task_group() as tg:
            await started(tg, results, "bulk", lambda: host.embed("m", LONG))
            await held.wait_for(1)  # the bulk call's first request is with the worker
            for text in shorts:
                await started(tg, results, text, lambda text=text: host.embed("m", [text]))
            await held.answer_all(lambda: after(results))
    assert results["bulk"].vectors == [pytest.approx(vector(t), abs=1e-6) for t in LONG]
    for text in shorts:
        assert results[text].vectors == [pytest.approx(vector(text), abs=1e-6)]
    return held, results


def _ids(texts: list[str]) -> list[list[int]]:
    return [BasicTokenizer().encode(t) for t in texts]


async def test_short_call_is_sent_before_the_bulk_calls_next_group(
    make_model: Any, make_config: Any
) -> None:
    held, _ = await bulk_then_shorts(make_config(budget_model(make_model)), ["short"])
    order = ["short" if f.sequences == _ids(["short"]) else "bulk" for f in held.received]
    # The short call waited for one group of the bulk call, no more.
    assert order[:3] == ["bulk", "short", "bulk"]
    assert order.count("short") == 1
    # The bulk call: in input order, each text sent exactly once, one per request.
    assert [f.sequences for f in held.received if f.sequences != _ids(["short"])] == [
        [ids] for ids in _ids(LONG)
    ]
    ids = [f.request_id for f in held.received]
    assert ids == sorted(ids)


async def test_the_longest_waiting_call_goes_next(make_model: Any, make_config: Any) -> None:
    """Round robin across calls, not first come first served across groups:
    two bulk calls and a short one take turns, each waiting one round."""
    held = HeldReplies()
    transport = InProcessFakeTransport()
    transport.reply_gate = held
    cfg = make_config(budget_model(make_model))
    first, second = LONG[:3], [f"other{i} " * 20 for i in range(3)]
    results: dict[str, Any] = {}
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        await host.embed("m", [LONG[0], "warm"])
        held.armed = True
        async with anyio.create_task_group() as tg:
            await started(tg, results, "a", lambda: host.embed("m", first))
            await held.wait_for(1)
            await started(tg, results, "b", lambda: host.embed("m", second))
            await started(tg, results, "short", lambda: host.embed("m", ["short"]))
            await held.answer_all()

    def owner(frame: Infer) -> str:
        ids = frame.sequences[0]
        return "a" if ids in _ids(first) else "b" if ids in _ids(second) else "short"

    assert [owner(f) for f in held.received] == ["a", "b", "short", "a", "b", "a", "b"]
    assert results["a"].vectors == [pytest.approx(vector(t), abs=1e-6) for t in first]
    assert results["b"].vectors == [pytest.approx(vector(t), abs=1e-6) for t in second]


async def test_short_calls_coalesce_between_the_bulk_calls_groups(
    make_model: Any, make_config: Any
) -> None:
    cfg = make_config(budget_model(make_model), coalesce=True)
    held, _ = await bulk_then_shorts(cfg, ["s one", "s two", "s three"])
    sizes = ["bulk" if f.sequences[0] in _ids(LONG) else len(f.sequences) for f in held.received]
    # The first short call waits for one bulk group; the two queued behind it
    # are served together, in one request, after the bulk's next group.
    assert sizes == ["bulk", 1, "bulk", 2, "bulk", "bulk"]


async def test_a_coalesced_call_takes_one_requests_worth(make_model: Any, make_config: Any) -> None:
    """Queued short calls are coalesced up to one request's budget, counted in
    buckets, so each caller has its rows once its own request is answered."""
    shorts = [f"s{i}" for i in range(7)]  # bucket 8: four to a request
    done_after: list[set[str]] = []  # the short calls done after each answer
    cfg = make_config(budget_model(make_model), coalesce=True)
    held, _ = await bulk_then_shorts(
        cfg, shorts, lambda results: done_after.append(set(results) - {"bulk"})
    )
    rows = [len(f.sequences) for f in held.received if f.sequences[0] not in _ids(LONG)]
    assert rows == [1, 4, 2]
    fours = next(i for i, f in enumerate(held.received) if len(f.sequences) == 4)
    assert done_after[fours] == set(shorts[:5])


def test_requests_are_cut_within_the_budget_shortest_first() -> None:
    from synapse_core.cut import group_by_bucket
    from synapse_core.plan import Item

    lengths = [30, 5, 30, 6, 7, 8, 12, 9, 10]
    items = [Item(i, "", n - 2, n) for i, n in enumerate(lengths)]
    groups = group_by_bucket(items, lambda n: 8 if n <= 8 else 32, 8, 32)
    # Four bucket-8 texts, or one bucket-32 text, per request; smallest bucket
    # first; a bucket split over several requests runs shortest first.
    assert [(g.bucket, [i.index for i in g.items]) for g in groups] == [
        (8, [1, 3, 4, 5]),
        (32, [7]),
        (32, [8]),
        (32, [6]),
        (32, [0]),
        (32, [2]),
    ]
    # A budget under one text's bucket still sends one text per request.
    assert [len(g.items) for g in group_by_bucket(items, lambda n: 32, 8, 10)] == [1] * 9
    # No budget: the batch size alone.
    assert [len(g.items) for g in group_by_bucket(items, lambda n: 32, 8)] == [8, 1]


def test_a_bucket_split_over_requests_gives_each_request_close_lengths() -> None:
    from synapse_core.cut import group_by_bucket
    from synapse_core.plan import Item

    # Interleaved short and long texts of one bucket, two requests' worth.
    lengths = [4 if i % 2 else 30 for i in range(16)]
    items = [Item(i, "", n - 2, n) for i, n in enumerate(lengths)]
    groups = group_by_bucket(items, lambda n: 32, 8)
    assert [sorted({i.length for i in g.items}) for g in groups] == [[4], [30]]
    # Every input still sent once; equal lengths keep their input order.
    assert [i.index for g in groups for i in g.items] == [*range(1, 16, 2), *range(0, 16, 2)]


def test_a_bucket_that_fits_one_request_keeps_input_order() -> None:
    from synapse_core.cut import group_by_bucket
    from synapse_core.plan import Item

    lengths = [30, 5, 30, 6, 12]
    items = [Item(i, "", n - 2, n) for i, n in enumerate(lengths)]
    # One request holding every input in input order: the host stores its rows whole.
    (group,) = group_by_bucket(items, lambda n: 32, 8)
    assert [i.index for i in group.items] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("bad", [0, -5, 1.5, True, "100"])
def test_max_batch_tokens_is_checked_in_the_catalog(bad: object) -> None:
    entry = {"name": "a", "task": "embed", "transport": "fake", "package": "p", "ceiling": 32}
    with pytest.raises(synapse.ConfigError, match=r"models\[0\]\.max_batch_tokens"):
        synapse.HostConfig.from_dict({"models": [{**entry, "max_batch_tokens": bad}]})
    config = synapse.HostConfig.from_dict({"models": [{**entry, "max_batch_tokens": 64}]})
    assert config.models[0].max_batch_tokens == 64


@pytest.mark.parametrize("bad", [0, -1, 2.5])
def test_a_transports_bad_default_budget_is_a_plugin_error(bad: object) -> None:
    from synapse_core.cut import request_budget

    class Odd(InProcessFakeTransport):
        def max_batch_tokens(self, model: Any) -> Any:
            return bad

    spec = synapse.HostConfig.from_dict(
        {
            "models": [
                {"name": "a", "task": "embed", "transport": "fake", "package": "p", "ceiling": 8}
            ]
        }
    ).models[0]
    with pytest.raises(synapse.PluginError, match=r"transport 'fake' gave max_batch_tokens"):
        request_budget(spec, Odd())
    assert request_budget(attrs.evolve(spec, max_batch_tokens=16), Odd()) == 16


#: starts a call of these texts, kept under this name, and lets it run until it waits
Start = Callable[[str, list[str]], Awaitable[None]]


async def bulk_alone(
    cfg: synapse.HostConfig,
    texts: list[str],
    meanwhile: Callable[[HeldReplies, Start], Awaitable[None]] | None = None,
) -> list[Infer]:
    """Serve one bulk call of ``texts`` from an idle worker, ``meanwhile``
    running once it has started, and answer every request in turn; returns
    the requests the worker received."""
    held = HeldReplies()
    transport = InProcessFakeTransport()
    transport.reply_gate = held
    results: dict[str, Any] = {}
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        await host.embed("m", [texts[0], "warm"])
        held.armed = True
        async with anyio.create_task_group() as tg:

            async def start(name: str, call_texts: list[str]) -> None:
                await started(tg, results, name, lambda: host.embed("m", call_texts))

            await start("bulk", texts)
            if meanwhile is not None:
                await meanwhile(held, start)
            await held.answer_all()
    assert results["bulk"].vectors == [pytest.approx(vector(t), abs=1e-6) for t in texts]
    return held.received


async def test_a_call_alone_sends_its_later_steps_joined_up_to_the_batch(
    make_model: Any, make_config: Any
) -> None:
    """The budget is for sharing: with the worker to itself, a bulk call's
    first request keeps to it (another call may come just as it starts) and
    the rest go in requests of up to ``max_batch`` texts, in input order."""
    texts = [f"b{i} " * 5 for i in range(20)]  # bucket 8: four texts per budget step
    received = await bulk_alone(make_config(budget_model(make_model)), texts)
    assert [len(f.sequences) for f in received] == [4, 8, 8]
    assert [ids for f in received for ids in f.sequences] == _ids(texts)


async def test_a_joined_request_holds_at_most_four_budgets(
    make_model: Any, make_config: Any
) -> None:
    """A joined request stops at ``JOINED_BUDGETS`` budgets of positions before
    the batch size: a small call coming while it runs waits for no more."""
    assert JOINED_BUDGETS == 4
    texts = [f"alone{i} " * 20 for i in range(11)]  # bucket 32: one text per budget step
    received = await bulk_alone(make_config(budget_model(make_model)), texts)
    assert [len(f.sequences) for f in received] == [1, 4, 4, 2]
    assert [ids for f in received for ids in f.sequences] == _ids(texts)


async def test_a_call_keeps_to_the_budget_once_a_small_call_came(
    make_model: Any, make_config: Any
) -> None:
    """A short call arriving during a bulk call's joined request makes the
    rest of the bulk call keep to the budget, also after the short call ended."""

    async def short_during_the_joined_request(held: HeldReplies, start: Start) -> None:
        await held.answer(0)  # the bulk call's first request, at the budget
        await held.wait_for(2)  # its second, joined
        await start("short", ["short"])

    texts = [f"joined{i} " * 20 for i in range(12)]
    cfg = make_config(budget_model(make_model))
    received = await bulk_alone(cfg, texts, short_during_the_joined_request)
    short = _ids(["short"])
    sizes = ["short" if f.sequences == short else len(f.sequences) for f in received]
    assert sizes == [1, 4, "short", *[1] * 7]
    assert [ids for f in received if f.sequences != short for ids in f.sequences] == _ids(texts)


async def test_bulk_calls_beside_each_other_alone_take_turns_in_joined_requests(
    make_model: Any, make_config: Any
) -> None:
    """The budget is for small calls: two bulk calls in the worker together
    still take turns (the waiting one goes next), each in requests of up to
    ``max_batch`` (and four budgets) after its first."""
    texts = [f"first{i} " * 20 for i in range(11)]
    other = [f"second{i} " * 20 for i in range(5)]

    async def a_second_bulk_call(held: HeldReplies, start: Start) -> None:
        await held.wait_for(1)
        await start("other", other)

    received = await bulk_alone(make_config(budget_model(make_model)), texts, a_second_bulk_call)
    mine = _ids(texts)
    sizes = [("bulk" if f.sequences[0] in mine else "other", len(f.sequences)) for f in received]
    assert sizes == [
        ("bulk", 1),
        ("other", 1),
        ("bulk", 4),
        ("other", 4),
        ("bulk", 4),
        ("bulk", 2),
    ]
    assert [ids for f in received if f.sequences[0] in mine for ids in f.sequences] == mine


async def test_a_bulk_call_beside_a_small_call_that_got_the_head_start_keeps_to_the_budget(
    make_model: Any, make_config: Any
) -> None:
    """A small call that took the head start (an idle worker) counts as small:
    a bulk call entering beside it keeps to the budget until the worker is
    idle, and the worker ends with no small call counted."""
    held = HeldReplies()
    transport = InProcessFakeTransport()
    transport.reply_gate = held
    results: dict[str, Any] = {}
    texts = [f"after{i} " * 20 for i in range(5)]
    async with synapse.open_host(
        make_config(budget_model(make_model)), plugins=[transport_plugin(transport)]
    ) as host:
        await host.embed("m", [texts[0], "warm"])
        held.armed = True
        async with anyio.create_task_group() as tg:
            await started(tg, results, "short", lambda: host.embed("m", ["short"]))
            await held.wait_for(1)  # the short call's head-start request is with the worker
            await started(tg, results, "bulk", lambda: host.embed("m", texts))
            await held.answer_all()
        worker = host.worker("m")
        assert worker is not None
        assert (worker.inflight, worker.small_inflight, worker.shared) == (0, 0, False)
    assert [len(f.sequences) for f in held.received] == [1] * 6  # the short, then five of one
    assert results["bulk"].vectors == [pytest.approx(vector(t), abs=1e-6) for t in texts]


def test_one_long_text_is_a_small_call() -> None:
    from synapse_core.plan import Item, Plan
    from synapse_core.tokenizer import BasicTokenizer

    def plan(*lengths: int) -> Plan:
        items = tuple(Item(i, "", n - 2, n) for i, n in enumerate(lengths))
        return Plan("m", "embed", items, BasicTokenizer())

    assert plan(300).within(32)  # a request never holds less than one input
    assert plan(10, 22).within(32) and not plan(10, 23).within(32)


def test_a_worker_is_shared_once_a_small_call_meets_another_until_idle() -> None:
    from synapse_core.launch import LaneInfo
    from synapse_core.residency.lane import Lane
    from synapse_core.residency.worker import Worker

    worker = Worker("m#1", None, None, None, Lane(LaneInfo("test:0"), 100))  # type: ignore[arg-type]
    first, second = worker.enter(False), worker.enter(False)
    assert not worker.shared  # two bulk calls
    small = worker.enter(True)
    assert worker.shared and worker.small_inflight == 1
    worker.leave(small)
    assert worker.shared  # sticky: the next short call is a moment away
    worker.leave(first)
    worker.leave(second)
    assert not worker.shared and (worker.inflight, worker.small_inflight) == (0, 0)
    worker.enter(True)
    assert not worker.shared  # a small call alone
    worker.enter(False)
    assert worker.shared  # a bulk call beside it


def test_join_steps_takes_whole_steps_and_part_of_the_last() -> None:
    from synapse_core.cut import join_steps
    from synapse_core.plan import Group, Item

    items = [Item(i, "", 3, 5) for i in range(9)]
    steps = [
        Group(8, items[0:1]),
        Group(8, items[1:4]),
        Group(8, items[4:7]),
        Group(32, items[7:9]),
    ]
    join_steps(steps, 0, 5)
    # Five bucket-8 items joined; the rest of the step taken in part stays; bucket 32 untouched.
    assert [(g.bucket, [i.index for i in g.items]) for g in steps] == [
        (8, [0, 1, 2, 3, 4]),
        (8, [5, 6]),
        (32, [7, 8]),
    ]
    join_steps(steps, 2, 5)  # nothing after it of its bucket
    assert len(steps) == 3


def test_join_steps_stops_at_the_positions_given_never_below_the_first_step() -> None:
    from synapse_core.cut import join_steps
    from synapse_core.plan import Group, Item

    items = [Item(i, "", 3, 5) for i in range(9)]
    steps = [Group(8, items[0:2]), Group(8, items[2:5]), Group(8, items[5:9])]
    join_steps(steps, 0, 8, positions=32)  # four bucket-8 items, under the batch of 8
    assert [[i.index for i in g.items] for g in steps] == [[0, 1, 2, 3], [4], [5, 6, 7, 8]]
    wide = [Group(8, items[0:3]), Group(8, items[3:5])]
    join_steps(wide, 0, 8, positions=8)  # one item's worth: the first step stays whole
    assert [[i.index for i in g.items] for g in wide] == [[0, 1, 2], [3, 4]]
