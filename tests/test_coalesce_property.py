"""Coalescing under generated arrivals: every caller ends once, with its own rows
or a documented error, and the host is left with nothing held or waiting.

Each example opens a host with coalescing on (an in-process fake worker) and
starts a wave of callers in one tick: each embeds one to three texts of its
own, and may give up (cancelled, or a deadline already past) or fall on the
one request the worker crashes on. Whatever the interleaving, no caller may
get another caller's rows, and once the wave has ended the snapshot shows no
lease, no call in flight and no call waiting.
"""

from __future__ import annotations

from typing import Any

import anyio
import attrs
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import synapse_core as synapse
from synapse_core.testing import (
    eventually,
    host_config,
    model_entry,
    transport_plugin,
)
from synapse_core.testing.fake import InProcessFakeTransport
from synapse_core.testing.fake_worker import fake_vector
from synapse_core.tokenizer import VOCAB, BasicTokenizer

DIMS = 4
#: errors a caller may end in here, besides its rows
DOCUMENTED = (synapse.Overloaded, synapse.OutcomeUnknown, synapse.WorkerFault)


@attrs.frozen
class Caller:
    texts: tuple[str, ...]
    #: "stay", "cancel" (after the wave started) or "late" (deadline already past)
    leaves: str
    #: also sends token ids past the vocabulary, which the worker rejects
    bad: bool = False


def callers() -> st.SearchStrategy[list[Caller]]:
    word = st.sampled_from(["alpha", "beta", "gamma", "delta", "long " * 9])
    text = st.lists(word, min_size=1, max_size=3).map(" ".join)
    caller = st.builds(
        Caller,
        st.lists(text, min_size=1, max_size=3).map(tuple),
        st.sampled_from(["stay", "stay", "stay", "cancel", "late"]),
        st.sampled_from([False, False, True]),
    )
    return st.lists(caller, min_size=1, max_size=24)


def expected(text: str) -> list[float]:
    return fake_vector(BasicTokenizer().encode(text), DIMS)


async def wave(
    wave_callers: list[Caller],
    crash_on: int | None,
    max_waiting: int,
    transport_class: type[InProcessFakeTransport],
) -> None:
    faults = {} if crash_on is None else {"crash_on_infer": crash_on, "only_generation": 1}
    model = model_entry(
        "m",
        transport="fake",
        package="pkg",
        ceiling=64,
        buckets=[8, 16, 32],
        dims=DIMS,
        max_batch=4,
        faults=faults,
    )
    config = host_config(
        model, coalesce=True, max_concurrent=2, max_waiting=max_waiting, exit_grace_s=5.0
    )
    transport = transport_class()
    outcomes: dict[int, Any] = {}
    async with synapse.open_host(config, plugins=[transport_plugin(transport)]) as host:
        await host.load("m")
        scopes = [anyio.CancelScope() for _ in wave_callers]

        async def call(index: int, caller: Caller) -> None:
            deadline = synapse.Deadline(0.0) if caller.leaves == "late" else None
            inputs: list[str | list[int]] = [*caller.texts, *([[VOCAB + 1]] if caller.bad else [])]
            with scopes[index]:
                try:
                    outcomes[index] = await host.embed("m", inputs, deadline=deadline)
                except synapse.SynapseError as exc:
                    outcomes[index] = exc
                return
            outcomes[index] = "cancelled"

        async with anyio.create_task_group() as tg:
            for index, caller in enumerate(wave_callers):
                tg.start_soon(call, index, caller)
            await anyio.sleep(0)  # every caller has arrived (or been refused)
            for index, caller in enumerate(wave_callers):
                if caller.leaves == "cancel":
                    scopes[index].cancel()

        assert sorted(outcomes) == list(range(len(wave_callers)))
        for index, caller in enumerate(wave_callers):
            outcome = outcomes[index]
            if isinstance(outcome, synapse.WorkerFault) and "rejected" in str(outcome):
                # Another caller's input must not fail this one.
                assert caller.bad and isinstance(outcome, synapse.WorkerRejected), (index, outcome)
            elif isinstance(outcome, synapse.EmbedResult):
                assert not caller.bad, index
                assert outcome.vectors == [
                    pytest.approx(expected(t), abs=1e-6) for t in caller.texts
                ], index
            elif caller.leaves == "late":
                assert isinstance(outcome, synapse.DeadlineExceeded | synapse.Overloaded), outcome
            elif caller.leaves == "cancel" and outcome == "cancelled":
                pass
            else:
                assert isinstance(outcome, DOCUMENTED), (index, outcome)
        await eventually(lambda: host.snapshot().worker("m").inflight == 0)
        worker = host.snapshot().worker("m")
        assert (worker.leases, host.backlog.waiting) == (0, 0)
        assert worker.restarts <= 1


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@example(  # a rejected input shares a request with others' (always tried)
    wave_callers=[
        Caller(("alpha",), "stay"),
        Caller(("beta",), "stay", bad=True),
        Caller(("gamma",), "stay"),
        Caller(("delta",), "stay"),
    ],
    crash_on=None,
    max_waiting=16,
)
@given(
    wave_callers=callers(),
    crash_on=st.none() | st.integers(min_value=1, max_value=4),
    max_waiting=st.integers(min_value=1, max_value=16),
)
def test_every_caller_ends_once_with_its_own_rows_or_a_documented_error(
    backend: str,
    wave_callers: list[Caller],
    crash_on: int | None,
    max_waiting: int,
    vocab_transport: type[InProcessFakeTransport],
) -> None:
    anyio.run(wave, wave_callers, crash_on, max_waiting, vocab_transport, backend=backend)
