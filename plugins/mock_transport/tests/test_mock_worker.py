"""The real mock worker process, spoken to over its pipes: protocol and lifecycle."""

from __future__ import annotations

import math
import signal
import subprocess
import sys
from typing import Any

import anyio
import msgspec
import pytest

from synapse_core.errors import ChannelClosed
from synapse_core.plugin import LaunchSpec, Reply, Shape
from synapse_core.wire import (
    PROTOCOL_VERSION,
    Admit,
    Admitted,
    Evict,
    Evicted,
    Failure,
    Infer,
    Inventory,
    Output,
    Shutdown,
    unpack_rows,
)
from synapse_core.worker import build_logic
from synapse_mock_transport.worker import IMPLEMENTATION, MockWorker

pytestmark = [pytest.mark.subprocess, pytest.mark.anyio]

Start = Any  # conftest's spawn / in_process: (options, generation) -> async context manager
BOUND_S = 15.0


async def test_hello_describes_the_process(spawn: Start) -> None:
    options = {"buckets": [64, 16], "dims": 8, "max_batch": 3}
    async with spawn(options, generation=5, name="mini") as worker:
        hello = worker.hello
        assert hello.pid == worker.process.pid
        assert (hello.protocol, hello.implementation) == (PROTOCOL_VERSION, IMPLEMENTATION)
        assert (hello.model, hello.package, hello.generation) == ("mini", "mock-pkg", 5)
        assert (hello.buckets, hello.dims, hello.max_batch) == ([16, 64], 8, 3)
        assert hello.identity == "mock:mock-pkg:d8:v1"


async def test_admit_infer_inventory_evict_in_turn(spawn: Start) -> None:
    async with spawn({"dims": 16}) as worker:
        assert await worker.admit(16, 2) == Admitted(1, Shape(16, 2), cold=True, cost=32)
        assert await worker.admit(16, 2) == Admitted(2, Shape(16, 2), cold=False, cost=32)
        assert await worker.admit(32, 1) == Admitted(3, Shape(32, 1), cold=True, cost=32)
        reply = await worker.infer([[5, 6], [7]], Shape(16, 2))
        assert isinstance(reply, Output)
        assert (reply.request_id, reply.shape, reply.rows, reply.dims) == (4, Shape(16, 2), 2, 16)
        vectors = unpack_rows(reply)
        for row in vectors:
            assert math.isclose(math.fsum(v * v for v in row), 1.0, rel_tol=1e-5)
        scores = await worker.infer([[5, 6], [9]], Shape(16, 2), "rerank", [5, 6])
        assert isinstance(scores, Output) and (scores.rows, scores.dims) == (2, 1)
        assert await worker.inventory() == Inventory(6, [Shape(16, 2), Shape(32, 1)])
        assert await worker.exchange(Evict(70, Shape(16, 2))) == Evicted(70, Shape(16, 2))
        assert await worker.inventory() == Inventory(7, [Shape(32, 1)])


async def test_subprocess_output_matches_the_in_process_logic(spawn: Start) -> None:
    sequences = [[3, 1, 4, 1, 5], [9, 2, 6], []]
    logic = build_logic(MockWorker, LaunchSpec("m", "p", "m#1", 1), pid=1)
    logic.handle(Admit(1, Shape(16, 4)))
    expected = logic.handle(Infer(2, Shape(16, 4), "embed", sequences))
    async with spawn() as worker:
        await worker.admit(16, 4)
        reply = await worker.infer(sequences, Shape(16, 4))
    assert isinstance(expected, Reply)
    # the same rows; each run reports its own compute time
    assert isinstance(reply, Output) and isinstance(reply.compute_ns, int)
    untimed = msgspec.structs.replace(reply, compute_ns=None)
    assert untimed == msgspec.structs.replace(expected.frame, compute_ns=None)


async def test_refusals_come_back_as_failure_frames(spawn: Start) -> None:
    async with spawn() as worker:
        bad_shape = await worker.admit(17, 1)
        assert isinstance(bad_shape, Failure) and bad_shape.code == "bad-shape"
        unadmitted = await worker.infer([[1]], Shape(16, 1))
        assert isinstance(unadmitted, Failure) and unadmitted.code == "bad-request"
        # The worker keeps serving after a refusal.
        assert isinstance(await worker.admit(16, 1), Admitted)
        assert isinstance(await worker.infer([[1]], Shape(16, 1)), Output)


async def test_shutdown_exits_cleanly(spawn: Start) -> None:
    async with spawn() as worker:
        await worker.channel.send(Shutdown())
        with anyio.fail_after(BOUND_S):
            assert await worker.process.wait() == 0
        with anyio.fail_after(BOUND_S), pytest.raises(ChannelClosed):
            await worker.channel.receive()


async def test_closing_the_channel_ends_the_worker(spawn: Start) -> None:
    async with spawn() as worker:
        await worker.launched.send.aclose()
        with anyio.fail_after(BOUND_S):
            assert await worker.process.wait() == 0


async def test_garbage_from_the_host_ends_the_worker(spawn: Start) -> None:
    async with spawn() as worker:
        await worker.launched.send.send(b"\x00\x00\x00\x02\xc1\xc1")
        with anyio.fail_after(BOUND_S):
            assert await worker.process.wait() == 4


async def test_an_oversized_header_from_the_host_ends_the_worker(spawn: Start) -> None:
    async with spawn() as worker:
        await worker.launched.send.send(b"\xff\xff\xff\xff")
        with anyio.fail_after(BOUND_S):
            assert await worker.process.wait() == 4


async def test_terminate_reaches_an_idle_worker(spawn: Start) -> None:
    async with spawn() as worker:
        worker.process.terminate()
        with anyio.fail_after(BOUND_S):
            assert await worker.process.wait() == -signal.SIGTERM


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("not json", "bad launch spec"),
        ('{"model": "m"}', "bad launch spec"),
        (
            msgspec.json.encode(
                LaunchSpec("m", "p", "m#1", 1, {"faults": {"crash_on_infer": "x"}})
            ).decode(),
            "options.faults.crash_on_infer",
        ),
    ],
    ids=["not-json", "missing-fields", "bad-option"],
)
@pytest.mark.parametrize(
    "command",
    [
        ["-m", "synapse_mock_transport.worker"],
        ["-m", "synapse_core.worker", "synapse_mock_transport.worker:MockWorker"],
        ["-m", "synapse_core.worker", "synapse_mock_transport.worker"],
    ],
    ids=["module", "kit-entry", "kit-entry-module"],
)
@pytest.mark.anyio
async def test_a_bad_launch_spec_exits_2_and_says_why(
    spec: str, message: str, command: list[str]
) -> None:
    with anyio.fail_after(BOUND_S):
        result = await anyio.run_process(
            [sys.executable, *command, "--spec", spec],
            stdin=subprocess.DEVNULL,
            check=False,
        )
    assert result.returncode == 2
    assert result.stdout == b""  # nothing that could be read as a frame
    assert message in result.stderr.decode()
