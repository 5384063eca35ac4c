"""The tracing hooks: the points a host's tracer is told of, in order, with
what the serving path knows there; nothing when nobody traces."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import anyio
import pytest

import synapse_core as synapse
from synapse_core.errors import Fault
from synapse_core.frontend import NO_TRACE, CallTrace, Tracer
from synapse_core.plan import Plan
from synapse_core.testing import transport_plugin
from synapse_core.testing.fake import InProcessFakeTransport
from synapse_core.tracing import Fanout, joined
from synapse_core.wire import Frame, Infer, Output, Shape

pytestmark = pytest.mark.anyio


class Recording(CallTrace):
    """Every point it is told, as a tuple."""

    def __init__(self, log: list[tuple[Any, ...]], model: str) -> None:
        self.log = log
        self.model = model

    def planned(self, plan: Plan) -> None:
        self.log.append(("planned", self.model, len(plan.items)))

    def admitted(self, shape: Shape) -> None:
        self.log.append(("admitted", self.model, shape.bucket))

    def exchanged(
        self, request: Infer, reply: Frame | Fault, worker_id: str, generation: int
    ) -> None:
        compute = reply.compute_ns if isinstance(reply, Output) else None
        row = ("exchanged", self.model, request.shape.bucket, len(request.sequences))
        self.log.append((*row, worker_id, generation, compute))


class Recorder(Tracer):
    """Hands each call a :class:`Recording`; ``label`` names calls apart."""

    def __init__(self, label: bool = False) -> None:
        self.log: list[tuple[Any, ...]] = []
        self.label = label

    def call(self, model: str, task: Any) -> CallTrace:
        self.log.append(("call", model, task))
        calls = sum(row[0] == "call" for row in self.log)
        return Recording(self.log, f"{model}#{calls}" if self.label else model)


async def test_a_call_is_planned_admitted_and_exchanged_in_order(
    make_model: Any, make_config: Any
) -> None:
    cfg = make_config(make_model("m", max_batch=2))
    plugins = [transport_plugin(InProcessFakeTransport())]
    async with synapse.open_host(cfg, plugins=plugins) as host:
        assert host.tracer.call("m", "embed") is NO_TRACE  # the default records nothing
        host.tracer = recorder = Recorder()
        await host.embed("m", ["a", "b", "c"])  # two requests: batches of at most two
    log = recorder.log
    assert log[:3] == [("call", "m", "embed"), ("planned", "m", 3), ("admitted", "m", 8)]
    exchanges = log[3:]
    assert [e[:4] for e in exchanges] == [("exchanged", "m", 8, 2), ("exchanged", "m", 8, 1)]
    worker_id = host.snapshot().worker("m").worker_id
    for exchange in exchanges:
        assert exchange[4:6] == (worker_id, 1)
        compute = exchange[6]
        assert isinstance(compute, int) and compute >= 0  # the worker's own measure


async def test_a_fault_is_told_as_the_exchange_s_reply(make_model: Any, make_config: Any) -> None:
    cfg = make_config(make_model("m", faults={"crash_on_infer": 1}))
    plugins = [transport_plugin(InProcessFakeTransport())]
    async with synapse.open_host(cfg, plugins=plugins) as host:
        host.tracer = recorder = Recorder()
        with pytest.raises(synapse.SynapseError):
            await host.embed("m", ["a"])
    assert [row[0] for row in recorder.log] == ["call", "planned", "admitted", "exchanged"]
    assert recorder.log[-1][-1] is None  # no output, no compute time


def test_joined_traces_tell_every_caller() -> None:
    log: list[tuple[Any, ...]] = []
    a, b = Recording(log, "a"), Recording(log, "b")
    assert joined([NO_TRACE, NO_TRACE]) is NO_TRACE
    assert joined([NO_TRACE, a]) is a
    both = joined([a, NO_TRACE, b])
    assert isinstance(both, Fanout)
    both.admitted(Shape(16, 2))
    assert log == [("admitted", "a", 16), ("admitted", "b", 16)]


async def test_coalesced_callers_each_see_the_shared_exchange(
    make_model: Any, make_config: Any
) -> None:
    cfg = make_config(make_model("m", max_batch=8), coalesce=True)
    plugins = [transport_plugin(InProcessFakeTransport())]
    async with synapse.open_host(cfg, plugins=plugins) as host:
        await host.load("m")
        host.tracer = recorder = Recorder(label=True)
        async with anyio.create_task_group() as tg:
            for text in ["one", "two", "three", "four"]:
                tg.start_soon(host.embed, "m", [text])
    log = recorder.log
    callers = {row[1] for row in log if row[0] == "planned"}
    assert len(callers) == 4
    # every caller's trace is told of its admission and the exchange that served it
    assert {row[1] for row in log if row[0] == "admitted"} == callers
    assert {row[1] for row in log if row[0] == "exchanged"} == callers
    assert len({row[2:] for row in log if row[0] == "exchanged"}) < 4  # some were shared


def test_the_core_imports_no_tracing_library() -> None:
    """Tracing off costs no import: opening the core loads no OpenTelemetry."""
    code = (
        "import sys, synapse_core, synapse_core.host, synapse_core.tracing\n"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry')]"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
