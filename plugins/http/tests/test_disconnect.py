"""A client that goes away while its call runs, in-process on both backends:
its request is answered 499 at once, the host drains the worker's reply
without a restart, and the app serves the next request."""

from __future__ import annotations

import json

import anyio
import pytest
from starlette.types import Message

import synapse_core as synapse
from synapse_core.testing import host_config, transport_plugin
from synapse_core.wire import Frame, Infer
from synapse_http import create_app
from synapse_http.testing import model
from synapse_mock_transport.inprocess import InProcessTransport

from .test_body import post, request, script

pytestmark = pytest.mark.anyio

BODY = json.dumps({"inputs": ["a"]}).encode()
HANG_S = 10.0


@pytest.mark.parametrize("polls", [0, 3])
async def test_a_disconnect_during_the_call_cancels_it_without_a_restart(polls: int) -> None:
    """``polls``: how many times ``receive()`` yields to the loop (as
    ``sleep(0)`` does) before it waits for the disconnect."""
    config = host_config(model("e"))
    transport = InProcessTransport()
    replies = anyio.Event()

    async def gate(model: str, frame: Frame) -> None:
        if isinstance(frame, Infer):
            await replies.wait()

    async with synapse.open_host(config, plugins=[transport_plugin(transport)]) as host:
        await host.load("e")
        transport.reply_gate = gate
        app = create_app(host)
        leave = anyio.Event()
        sent = [request(BODY)]

        async def receive() -> Message:
            if sent:
                return sent.pop()
            for _ in range(polls):
                await anyio.sleep(0)
            await leave.wait()
            return {"type": "http.disconnect"}

        answers: list[tuple[int, object]] = []
        # a watch that missed the disconnect would wait for the held reply forever
        with anyio.fail_after(HANG_S):
            async with anyio.create_task_group() as tg:

                async def call() -> None:
                    answers.append(await post(app, receive))

                tg.start_soon(call)
                await anyio.wait_all_tasks_blocked()  # the reply is held
                assert not answers and host.snapshot().worker("e").inflight == 1
                leave.set()
        assert answers == [(499, None)]  # answered with the reply still held
        assert host.snapshot().worker("e").inflight == 1  # the host drains it
        replies.set()
        assert (await post(app, script(request(BODY))))[0] == 200
        worker = host.snapshot().worker("e")
        assert (worker.inflight, worker.leases, worker.restarts) == (0, 0, 0)
