"""Every fault knob of the mock worker, against the real process and the in-process variant.

Tests taking ``start`` run twice: once with the subprocess worker and once with
the in-process one, so the in-process tests elsewhere speak for the real worker.
Timeouts here are bounds that end a test, never timing claims; delays are only
checked from below (a reply cannot arrive before the worker has slept).
"""

from __future__ import annotations

import signal
from typing import Any

import anyio
import pytest

from synapse_core.channel import Exchange
from synapse_core.errors import ChannelClosed, ExchangeTimeout
from synapse_core.plugin import Shape, WireError, confirm_exit
from synapse_core.wire import Admit, Admitted, Failure, Inventory, Output

pytestmark = pytest.mark.anyio

Start = Any  # conftest's start / spawn / in_process
Trace = Any  # conftest's TraceFile
BOUND_S = 15.0
#: asyncio may fire a timer up to its clock resolution early
SLACK_S = 0.01
SHAPE = Shape(16, 2)


async def admitted(worker: Any) -> None:
    reply = await worker.admit(SHAPE.bucket, SHAPE.batch)
    assert isinstance(reply, Admitted), reply


async def reaped_status(worker: Any) -> int:
    with anyio.fail_after(BOUND_S):
        status: int = await worker.process.wait()
    return status


# -- delays ------------------------------------------------------------------------------


async def test_reply_delay_holds_every_reply(start: Start) -> None:
    delay = 0.4
    async with start({"faults": {"reply_delay_s": delay}}) as worker:
        sent = anyio.current_time()
        # A bound shorter than the delay times out first; the reply follows it.
        with pytest.raises(ExchangeTimeout):
            await worker.infer(timeout=0.05)
        with anyio.fail_after(BOUND_S):
            late = await worker.channel.receive()
        assert anyio.current_time() - sent >= delay - SLACK_S
        # Not admitted: the late reply is the refusal of that request, id 1.
        assert isinstance(late, Failure) and late.request_id == 1
        sent = anyio.current_time()
        assert isinstance(await worker.inventory(), Inventory)
        assert anyio.current_time() - sent >= delay - SLACK_S


async def test_cold_admit_delay_holds_only_cold_admissions(start: Start, trace: Trace) -> None:
    delay = 0.3
    options = {"faults": {"cold_admit_delay_s": delay}, "trace": str(trace.path)}
    async with start(options) as worker:
        sent = anyio.current_time()
        cold = await worker.admit(16, 2)
        assert anyio.current_time() - sent >= delay - SLACK_S
        assert isinstance(cold, Admitted) and cold.cold
        warm = await worker.admit(16, 2)
        assert isinstance(warm, Admitted) and not warm.cold
        # Another shape is cold again: a bound shorter than the delay times out.
        with pytest.raises(ExchangeTimeout):
            await worker.exchange(Admit(9, Shape(32, 1)), timeout=0.05)
    assert trace.frames() == ["hello", "admit", "admit", "admit"]


# -- crashes -------------------------------------------------------------------------------


async def test_crash_on_infer_exits_on_that_infer_after_tracing_it(
    start: Start, trace: Trace
) -> None:
    options = {"faults": {"crash_on_infer": 2}, "trace": str(trace.path)}
    async with start(options) as worker:
        await admitted(worker)
        assert isinstance(await worker.infer(), Output)
        progress = Exchange()
        with pytest.raises(ChannelClosed):
            await worker.infer(progress=progress)
        assert progress.written  # the request left: its outcome is unknown
        assert await reaped_status(worker) == 3
        pid = worker.hello.pid
    records = trace.records()
    assert [r["frame"] for r in records] == ["hello", "admit", "infer", "infer"]
    crashing = records[-1]
    assert crashing["request_id"] == 3
    assert (crashing["pid"], crashing["generation"], crashing["shape"]) == (pid, 1, [16, 2])


async def test_crash_on_admit_exits_on_that_admission(start: Start, trace: Trace) -> None:
    options = {"faults": {"crash_on_admit": 2}, "trace": str(trace.path)}
    async with start(options) as worker:
        await admitted(worker)
        with pytest.raises(ChannelClosed):
            await worker.admit(32, 1)
        assert await reaped_status(worker) == 3
    assert trace.frames() == ["hello", "admit", "admit"]


# -- bad replies and silence -----------------------------------------------------------------


async def test_malformed_on_infer_sends_an_undecodable_frame(start: Start) -> None:
    async with start({"faults": {"malformed_on_infer": 1}}) as worker:
        await admitted(worker)
        with pytest.raises(WireError, match="undecodable"):
            await worker.infer()
        # Only that reply was bad: the frame was whole, so the stream is still in step.
        assert isinstance(await worker.infer(), Output)


async def test_malformed_reply_is_delayed_like_any_reply(start: Start) -> None:
    delay = 0.2
    async with start({"faults": {"malformed_on_infer": 1, "reply_delay_s": delay}}) as worker:
        await admitted(worker)
        sent = anyio.current_time()
        with pytest.raises(WireError):
            await worker.infer()
        assert anyio.current_time() - sent >= delay - SLACK_S


async def test_hang_on_infer_times_out_and_terminate_ends_it(start: Start, trace: Trace) -> None:
    options = {"faults": {"hang_on_infer": 2}, "trace": str(trace.path)}
    async with start(options) as worker:
        await admitted(worker)
        assert isinstance(await worker.infer(), Output)
        progress = Exchange()
        with pytest.raises(ExchangeTimeout):
            await worker.infer(timeout=0.3, progress=progress)
        assert progress.written
        assert worker.process.returncode is None  # hung, not gone
        assert await confirm_exit(worker.process, BOUND_S)
        assert await reaped_status(worker) == -signal.SIGTERM
    assert trace.frames() == ["hello", "admit", "infer", "infer"]


# -- generations -------------------------------------------------------------------------------


async def test_only_generation_makes_the_other_generations_healthy(
    start: Start, trace: Trace
) -> None:
    faults = {"crash_on_infer": 1, "only_generation": 1}
    options = {"faults": faults, "trace": str(trace.path)}
    async with start(options, generation=1) as first:
        await admitted(first)
        with pytest.raises(ChannelClosed):
            await first.infer()
        assert await reaped_status(first) == 3
    async with start(options, generation=2) as second:
        assert second.hello.generation == 2
        await admitted(second)
        for _ in range(3):
            assert isinstance(await second.infer(), Output)
    generations = [(r["generation"], r["frame"]) for r in trace.records()]
    assert generations == [
        (1, "hello"),
        (1, "admit"),
        (1, "infer"),
        (2, "hello"),
        (2, "admit"),
        (2, "infer"),
        (2, "infer"),
        (2, "infer"),
    ]


async def test_only_generation_can_target_a_later_generation(start: Start) -> None:
    options = {"faults": {"malformed_on_infer": 1, "only_generation": 3}}
    async with start(options, generation=2) as healthy:
        await admitted(healthy)
        assert isinstance(await healthy.infer(), Output)
    async with start(options, generation=3) as faulty:
        await admitted(faulty)
        with pytest.raises(WireError):
            await faulty.infer()


# -- SIGTERM ------------------------------------------------------------------------------------


@pytest.mark.subprocess
async def test_ignore_sigterm_survives_terminate_and_exit_is_confirmed_by_kill(
    spawn: Start,
) -> None:
    async with spawn({"faults": {"ignore_sigterm": True}}) as worker:
        worker.process.terminate()
        # The signal was sent before this request: answering it proves it was ignored.
        assert isinstance(await worker.inventory(), Inventory)
        assert worker.process.returncode is None
        assert await confirm_exit(worker.process, 0.5)
        assert await reaped_status(worker) == -signal.SIGKILL


@pytest.mark.subprocess
async def test_a_worker_without_ignore_sigterm_dies_on_terminate(spawn: Start) -> None:
    async with spawn({"faults": {"ignore_sigterm": True, "only_generation": 2}}) as worker:
        worker.process.terminate()
        assert await reaped_status(worker) == -signal.SIGTERM
        with pytest.raises(ChannelClosed):
            await worker.inventory()


async def test_in_process_ignore_sigterm_needs_a_kill(in_process: Start) -> None:
    async with in_process({"faults": {"ignore_sigterm": True}}) as worker:
        process = worker.process
        process.terminate()
        assert process.terminated and not process.exited
        assert isinstance(await worker.inventory(), Inventory)
        process.kill()
        await reaped_status(worker)
        assert process.killed and process.exited


# -- tracing -------------------------------------------------------------------------------------


async def test_trace_records_every_frame_with_pid_generation_shape_and_id(
    start: Start, trace: Trace
) -> None:
    async with start({"trace": str(trace.path)}, generation=4, name="traced") as worker:
        await admitted(worker)
        await worker.infer()
        await worker.inventory()
        pid = worker.hello.pid
    records = trace.records()
    assert records == [
        {"pid": pid, "model": "traced", "generation": 4, "frame": "hello", "shape": None,
         "request_id": None},
        {"pid": pid, "model": "traced", "generation": 4, "frame": "admit", "shape": [16, 2],
         "request_id": 1, "cold": True},
        {"pid": pid, "model": "traced", "generation": 4, "frame": "infer", "shape": [16, 2],
         "request_id": 2, "rows": 1},
        {"pid": pid, "model": "traced", "generation": 4, "frame": "inventory", "shape": None,
         "request_id": 3},
    ]  # fmt: skip
