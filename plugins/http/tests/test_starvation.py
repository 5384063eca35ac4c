"""The starvation scenario through the HTTP face: one client sends one bulk
``/embed`` of long texts, another sends short requests meanwhile.

A real server (uvicorn on asyncio, hypercorn on trio) listens on 127.0.0.1
in the test's own process, for a host whose in-process fake worker holds
every reply until the test lets it go. Before a reply is released, each
short request is known to have reached the app whole (its body read) and
every task to be waiting, so the order the worker sees requests in is the
host's decision alone, never a matter of timing. The rule: a short request
waits for the bulk request's group under way, and is answered before any
of the bulk request's remaining groups is sent.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import synapse_core as synapse
from synapse_core.testing import host_config, model_entry, transport_plugin
from synapse_core.testing.fake import HeldReplies, InProcessFakeTransport
from synapse_core.testing.fake_worker import fake_vector
from synapse_core.tokenizer import BasicTokenizer
from synapse_http import ServeSettings, create_app
from synapse_http.server import bind, run_app

pytestmark = pytest.mark.anyio

#: 22 positions with [CLS] and [SEP]: bucket 32, one text per group at a budget of 32
LONG = [f"long{i} " * 20 for i in range(6)]
SHORTS = ["short one", "short two", "short three"]


class BodiesRead:
    """Wraps an ASGI app, counting the requests whose whole body it has read."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.count = 0
        self._read = anyio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def counted() -> Message:
            message = await receive()
            if message["type"] == "http.request" and not message.get("more_body", False):
                self.count += 1
                self._read.set()
                self._read = anyio.Event()
            return message

        await self.app(scope, counted if scope["type"] == "http" else receive, send)

    async def wait_for(self, count: int) -> None:
        while self.count < count:
            await self._read.wait()


@asynccontextmanager
async def serving(host: synapse.Host, backend: str) -> AsyncIterator[tuple[str, BodiesRead]]:
    """``synapse serve``'s server for ``host`` on an ephemeral loopback port."""
    settings = ServeSettings(shutdown_grace_s=5.0, drain_s=0.0)
    app = BodiesRead(create_app(host, settings))
    sock: socket.socket = bind("127.0.0.1", 0)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    stop, force = anyio.Event(), anyio.Event()
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(run_app, app, sock, backend, settings, stop, force)
            yield url, app
            stop.set()
            force.set()  # every request has been answered: no grace needed
    finally:
        sock.close()


def vector(text: str) -> list[float]:
    return fake_vector(BasicTokenizer().encode(text), 4)


def owner(frame: Any) -> str:
    ids = frame.sequences
    return "bulk" if len(ids) == 1 and len(ids[0]) == 20 else "short"


async def test_short_requests_are_answered_between_the_bulk_requests_groups(
    anyio_backend: str,
) -> None:
    entry = model_entry("m", transport="fake", ceiling=200, buckets=[8, 32], dims=4, max_batch=8)
    cfg = host_config({**entry, "max_batch_tokens": 32}, exit_grace_s=5.0, exchange_timeout_s=10.0)
    held = HeldReplies()
    transport = InProcessFakeTransport()
    transport.reply_gate = held
    answers: dict[str, httpx.Response] = {}
    answered = {name: anyio.Event() for name in ["bulk", *SHORTS]}
    with anyio.fail_after(30):
        async with (
            synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host,
            serving(host, anyio_backend) as (url, bodies),
            httpx.AsyncClient(base_url=url, timeout=20) as bulk_client,
            httpx.AsyncClient(base_url=url, timeout=20) as short_client,
        ):
            # Both shapes admitted first: only inferences follow.
            warm = await short_client.post("/embed", json={"inputs": [LONG[0], "warm"]})
            assert warm.status_code == 200
            held.armed = True
            async with anyio.create_task_group() as tg:

                async def post(client: httpx.AsyncClient, name: str, inputs: list[str]) -> None:
                    body = {"inputs": inputs, "normalize": False}  # the worker's rows as they are
                    answers[name] = await client.post("/embed", json=body)
                    answered[name].set()

                tg.start_soon(post, bulk_client, "bulk", LONG)
                await held.wait_for(1)  # the bulk request's first group is with the worker
                for text in SHORTS:
                    read = bodies.count
                    tg.start_soon(post, short_client, text, [text])
                    await bodies.wait_for(read + 1)  # the server has the whole request...
                    await anyio.wait_all_tasks_blocked()  # ... and its call waits
                    # Every exchange with the worker is in-process: once every
                    # task waits, the next request is with the worker.
                    sent = len(held.received)
                    await held.answer(sent - 1)  # the bulk request's group under way ends
                    assert [owner(f) for f in held.received[sent:]] == ["short"]
                    await held.answer(sent)
                    # The bulk request goes on (its next group held) once the short one is done.
                    assert [owner(f) for f in held.received[sent:]] == ["short", "bulk"]
                    await answered[text].wait()  # answered while the bulk request waits
                    assert not answered["bulk"].is_set()
                await held.answer_all()
    order = [owner(frame) for frame in held.received]
    assert order == ["bulk", "short"] * len(SHORTS) + ["bulk"] * (len(LONG) - len(SHORTS))
    # The bulk request: in input order, each text sent once, one per group.
    bulk_ids = [f.sequences[0] for f in held.received if owner(f) == "bulk"]
    assert bulk_ids == [BasicTokenizer().encode(t) for t in LONG]
    assert answers["bulk"].status_code == 200
    assert answers["bulk"].json() == [pytest.approx(vector(t), abs=1e-6) for t in LONG]
    for text in SHORTS:
        assert answers[text].status_code == 200
        assert answers[text].json() == [pytest.approx(vector(text), abs=1e-6)]
